#!/usr/bin/env python3
"""deepinfer serve driven by the official openai Python client: models, chat and completions (whole and
streamed), n, seeds, logprobs, tools and tool-call history, thinking mode, and the client-side view of
errors. Runs on the tiny fp32 fixture with a byte tokenizer (tokens are random bytes: the checks are on
structure, counts and determinism, not on text quality)."""
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_fixture as sf  # noqa: E402

sf.require_openai()
import openai  # noqa: E402

MODEL = "tiny"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


class OpenAIClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = sf.Server(["--model", sf.TINY_MODEL, "--tokenizer", sf.TINY_TOKENIZER,
                                "--served-model-name", MODEL, "--max-context", "2048"]).__enter__()
        cls.client = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused", max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)
        assert cls.server.rc == 0, f"server exit code {cls.server.rc}:\n" + "".join(cls.server.log)

    def chat(self, **kw):
        args = dict(model=MODEL, messages=[{"role": "user", "content": "Hello there"}], max_tokens=6,
                    temperature=0, extra_body={"ignore_eos": True})
        args.update(kw)
        return self.client.chat.completions.create(**args)

    def test_models(self):
        ids = [m.id for m in self.client.models.list()]
        self.assertEqual(ids, [MODEL])

    def test_chat_whole(self):
        r = self.chat()
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, MODEL)
        c = r.choices[0]
        self.assertEqual(c.message.role, "assistant")
        self.assertIsInstance(c.message.content, str)
        self.assertEqual(c.finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 6)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 6)
        # Greedy is deterministic.
        self.assertEqual(self.chat().choices[0].message.content, c.message.content)

    def test_chat_stream_equals_whole(self):
        whole = self.chat().choices[0].message.content
        stream = self.chat(stream=True, stream_options={"include_usage": True})
        text, finish, usage, n_chunks = "", None, None, 0
        for chunk in stream:
            n_chunks += 1
            if chunk.usage is not None:
                usage = chunk.usage
                self.assertEqual(chunk.choices, [])
                continue
            d = chunk.choices[0].delta
            text += d.content or ""
            finish = chunk.choices[0].finish_reason or finish
        self.assertEqual(text, whole)
        self.assertEqual(finish, "length")
        self.assertIsNotNone(usage)
        self.assertEqual(usage.completion_tokens, 6)
        self.assertGreaterEqual(n_chunks, 3)

    def test_seeded_sampling_is_reproducible_and_n_gives_choices(self):
        a = self.chat(temperature=0.9, top_p=0.9, seed=123, n=3)
        b = self.chat(temperature=0.9, top_p=0.9, seed=123, n=3)
        self.assertEqual([c.index for c in a.choices], [0, 1, 2])
        self.assertEqual([c.message.content for c in a.choices], [c.message.content for c in b.choices])
        self.assertEqual(a.usage.completion_tokens, 18)

    def test_completions(self):
        r = self.client.completions.create(model=MODEL, prompt="Once upon", max_tokens=5, temperature=0,
                                           logprobs=2, extra_body={"ignore_eos": True})
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.usage.prompt_tokens, len("Once upon".encode()))
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 5)
        # A dict keyed by token text: byte tokens that are not UTF-8 all read "\ufffd" and may share a key.
        self.assertIn(len(lp.top_logprobs[0]), (1, 2))
        ids = self.client.completions.create(model=MODEL, prompt=[79, 110, 99, 101], max_tokens=3, temperature=0,
                                             extra_body={"ignore_eos": True})
        self.assertEqual(ids.usage.prompt_tokens, 4)
        chunks = list(self.client.completions.create(model=MODEL, prompt="Once upon", max_tokens=5, temperature=0,
                                                     stream=True, extra_body={"ignore_eos": True}))
        self.assertEqual("".join(c.choices[0].text for c in chunks), r.choices[0].text)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "length")

    def test_completions_echo_scores_the_prompt(self):
        # What lm-evaluation-harness's local-completions sends for a log-likelihood: echo, logprobs,
        # max_tokens 0.
        r = self.client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=0, echo=True,
                                           logprobs=1)
        self.assertEqual(r.choices[0].text, "Once upon a time")
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), r.usage.prompt_tokens)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertTrue(all(x <= 0 for x in lp.token_logprobs[1:]))
        self.assertEqual(r.usage.completion_tokens, 0)

    def test_chat_logprobs(self):
        r = self.chat(logprobs=True, top_logprobs=2)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 6)
        for t in content:
            self.assertLessEqual(t.logprob, 0.0)
            self.assertEqual(len(t.top_logprobs), 2)
            self.assertEqual(t.top_logprobs[0].logprob, t.logprob)  # greedy picks the most likely

    def test_tools_and_tool_call_history(self):
        history = [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
        ]
        plain = self.chat(messages=history, max_tokens=2)
        with_tools = self.chat(messages=history, tools=TOOLS, tool_choice="auto", max_tokens=2)
        self.assertEqual(with_tools.usage.completion_tokens, 2)
        # The tool definitions are part of the prompt the model sees (one long prefill: ~1,200 byte tokens).
        self.assertGreater(with_tools.usage.prompt_tokens, plain.usage.prompt_tokens + 50)
        with self.assertRaises(openai.BadRequestError) as e:
            self.chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "no_such_tool"}})
        self.assertIn("tool_choice", str(e.exception))

    def test_tool_choice_required_and_named(self):
        # Random weights never close a free string: the city is an enum here.
        weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
            "required": ["city"], "additionalProperties": False}}}
        tools = [weather, {"type": "function", "function": {"name": "now", "parameters": {
            "type": "object", "properties": {}, "additionalProperties": False}}}]
        for choice in ["required", {"type": "function", "function": {"name": "get_weather"}}]:
            for seed in range(3):  # random weights: only the constraint makes these calls
                r = self.chat(tools=tools, tool_choice=choice, max_tokens=200, temperature=1.0, seed=seed,
                              extra_body={}, parallel_tool_calls=False)
                c = r.choices[0]
                self.assertEqual(c.finish_reason, "tool_calls", c.message)
                self.assertEqual(len(c.message.tool_calls), 1, c.message)
                call = c.message.tool_calls[0]
                self.assertTrue(call.id.startswith("call_"))
                args = json.loads(call.function.arguments)
                if choice != "required":
                    self.assertEqual(call.function.name, "get_weather")
                if call.function.name == "get_weather":
                    self.assertIn(args.get("city"), ["Paris", "Lima"], args)
                else:
                    self.assertEqual(call.function.name, "now")

    def test_thinking_mode(self):
        r = self.chat(extra_body={"ignore_eos": True, "chat_template_kwargs": {"thinking": True}})
        msg = r.choices[0].message
        # Before </think> everything the model writes is reasoning.
        self.assertIsInstance(msg.model_extra.get("reasoning_content"), str)
        self.assertEqual(msg.content, "")
        chunks = list(self.chat(stream=True, extra_body={"ignore_eos": True, "thinking": {"type": "enabled"}}))
        reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                            for c in chunks if c.choices)
        self.assertEqual(reasoning, msg.model_extra["reasoning_content"])

    def test_structured_output(self):
        schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                                   "n": {"type": "integer", "minimum": 0, "maximum": 99}},
                  "required": ["answer", "n"], "additionalProperties": False}
        rf = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}
        for seed in range(4):  # random weights: only the constraint makes this JSON
            r = self.chat(max_tokens=80, temperature=1.0, seed=seed, extra_body={}, response_format=rf)
            self.assertEqual(r.choices[0].finish_reason, "stop", r.choices[0].message.content)
            out = json.loads(r.choices[0].message.content)
            self.assertEqual(set(out), {"answer", "n"})
            self.assertIn(out["answer"], ["yes", "no"])
            self.assertTrue(isinstance(out["n"], int) and 0 <= out["n"] <= 99, out)
        whole = self.chat(max_tokens=80, extra_body={}, response_format=rf).choices[0].message.content
        chunks = self.chat(max_tokens=80, extra_body={}, response_format=rf, stream=True)
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks if c.choices), whole)
        obj = self.chat(max_tokens=300, extra_body={}, response_format={"type": "json_object"}).choices[0]
        self.assertTrue(obj.message.content.startswith("{"), obj.message.content)
        if obj.finish_reason == "stop":
            self.assertIsInstance(json.loads(obj.message.content), dict)
        with self.assertRaises(openai.BadRequestError) as e:
            self.chat(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}})
        self.assertEqual(e.exception.body.get("param"), "response_format")

    def test_errors_reach_the_client(self):
        with self.assertRaises(openai.NotFoundError):
            self.chat(model="gpt-17")
        with self.assertRaises(openai.BadRequestError) as e:
            self.chat(max_tokens=0)
        self.assertEqual(e.exception.body.get("param"), "max_tokens")
        with self.assertRaises(openai.BadRequestError):
            self.chat(messages=[])
        with self.assertRaises(openai.BadRequestError) as e:
            self.chat(messages=[{"role": "user", "content": "x" * 2100}])
        self.assertEqual(e.exception.body.get("code"), "context_length_exceeded")
        with self.assertRaises(openai.BadRequestError):
            self.chat(extra_body={"frobnicate": True})
        # Still healthy, nothing held.
        m = self.server.metrics()
        self.assertEqual(m['deepinfer_state_memory_bytes{kind="reserved"}'], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
