#!/usr/bin/env python3
"""deepinfer serve's /v1/messages driven by the official anthropic Python client: whole and streamed
messages (the stream's final message equals the whole one), system prompts, tools with tool_use /
tool_result history, thinking blocks, usage, and the client-side view of errors. Runs on the tiny fp32
fixture with a byte tokenizer (checks are on structure, counts and determinism, not on text quality)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_fixture as sf  # noqa: E402

try:
    import anthropic  # noqa: E402
except ImportError:
    print("SKIP: the anthropic package is not installed (tools/setup.sh installs it when online)")
    sys.exit(sf.SKIP)

MODEL = "tiny"
TOOLS = [{"name": "get_weather", "description": "Weather for a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


class AnthropicClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = sf.Server(["--model", sf.TINY_MODEL, "--tokenizer", sf.TINY_TOKENIZER,
                                "--served-model-name", MODEL, "--max-context", "2048"]).__enter__()
        cls.client = anthropic.Anthropic(base_url=cls.server.url, api_key="unused", max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)
        assert cls.server.rc == 0, f"server exit code {cls.server.rc}:\n" + "".join(cls.server.log)

    def args(self, **kw):
        # Sampling fields are gone from this client's signature (the server still takes them): extra_body.
        a = dict(model=MODEL, max_tokens=6, messages=[{"role": "user", "content": "Hello there"}],
                 extra_body={"ignore_eos": True, "temperature": 0})
        a.update(kw)
        return a

    def test_whole_message(self):
        m = self.client.messages.create(**self.args())
        self.assertEqual(m.type, "message")
        self.assertEqual(m.role, "assistant")
        self.assertEqual(m.model, MODEL)
        self.assertTrue(m.id.startswith("msg_"))
        self.assertEqual(m.stop_reason, "max_tokens")
        self.assertEqual(m.usage.output_tokens, 6)
        self.assertGreater(m.usage.input_tokens, 0)
        self.assertTrue(all(b.type == "text" for b in m.content))
        again = self.client.messages.create(**self.args())
        self.assertEqual([b.text for b in again.content], [b.text for b in m.content])  # greedy: the same text

    def test_stream_equals_whole(self):
        whole = self.client.messages.create(**self.args(max_tokens=8))
        with self.client.messages.stream(**self.args(max_tokens=8)) as s:
            streamed_text = "".join(s.text_stream)
            final = s.get_final_message()
        self.assertEqual(streamed_text, "".join(b.text for b in whole.content if b.type == "text"))
        self.assertEqual([b.model_dump() for b in final.content], [b.model_dump() for b in whole.content])
        self.assertEqual(final.stop_reason, "max_tokens")
        self.assertEqual(final.usage.output_tokens, 8)
        # The raw events arrive in Anthropic's order.
        kinds = [e.type for e in self.client.messages.create(**self.args(max_tokens=4), stream=True)]
        self.assertEqual(kinds[0], "message_start")
        self.assertEqual(kinds[-2:], ["message_delta", "message_stop"])

    def test_system_tools_and_tool_history(self):
        plain = self.client.messages.create(**self.args(max_tokens=2))
        history = [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21 C"},
                {"type": "text", "text": "And tomorrow?"}]},
        ]
        m = self.client.messages.create(**self.args(max_tokens=2, system="Be brief.", messages=history, tools=TOOLS,
                                                    tool_choice={"type": "auto"}))
        self.assertEqual(m.usage.output_tokens, 2)
        # The tool definitions and the history are part of the prompt the model sees (input_tokens leaves out
        # what the prefix cache restored, as Anthropic's leaves out cache reads).
        prompt = lambda u: u.input_tokens + (u.cache_read_input_tokens or 0)
        self.assertGreater(prompt(m.usage), prompt(plain.usage) + 50)
        with self.assertRaises(anthropic.BadRequestError) as e:
            self.client.messages.create(**self.args(tools=TOOLS, tool_choice={"type": "tool", "name": "nope"}))
        self.assertIn("tool_choice", str(e.exception))

    def test_tool_choice_any_and_named(self):
        # Random weights never close a free string: the city is an enum here.
        tools = [{"name": "get_weather", "input_schema": {
            "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
            "required": ["city"], "additionalProperties": False}}]
        # One call each (a random model offered several would keep calling until max_tokens).
        for choice in [{"type": "any", "disable_parallel_tool_use": True}, {"type": "tool", "name": "get_weather"}]:
            m = self.client.messages.create(**self.args(max_tokens=200, tools=tools, tool_choice=choice,
                                                        extra_body={"temperature": 1.0}))
            self.assertEqual(m.stop_reason, "tool_use", m.content)
            uses = [b for b in m.content if b.type == "tool_use"]
            self.assertEqual(len(uses), 1, m.content)
            for u in uses:
                self.assertEqual(u.name, "get_weather")
                self.assertIn(u.input.get("city"), ["Paris", "Lima"])

    def test_thinking_blocks(self):
        m = self.client.messages.create(**self.args(max_tokens=5, thinking={"type": "enabled", "budget_tokens": 1024}))
        self.assertGreaterEqual(len(m.content), 1)
        self.assertEqual(m.content[0].type, "thinking")  # output starts as reasoning until </think>
        with self.client.messages.stream(**self.args(max_tokens=5, thinking={"type": "enabled", "budget_tokens": 1024})) as s:
            final = s.get_final_message()
        self.assertEqual([b.model_dump() for b in final.content], [b.model_dump() for b in m.content])

    def test_errors(self):
        with self.assertRaises(anthropic.BadRequestError) as e:  # max_tokens is required by the API
            self.client.messages.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=0)
        self.assertIn("max_tokens", str(e.exception))
        with self.assertRaises(anthropic.BadRequestError) as e:
            self.client.messages.create(**self.args(extra_body={"frobnicate": 1, "temperature": 0}))
        self.assertIn("frobnicate", str(e.exception))
        with self.assertRaises(anthropic.BadRequestError) as e:
            self.client.messages.create(**self.args(messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]))
        self.assertIn("image", str(e.exception))
        with self.assertRaises(anthropic.NotFoundError):
            self.client.messages.create(**self.args(model="other"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
