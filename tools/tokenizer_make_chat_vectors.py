#!/usr/bin/env python3
"""Builds tests/data/tokenizer/chat_vectors.json (prompt encoding) and dsml_vectors.json (output parsing) with
DeepSeek's V4 reference encoder as vLLM ships it (vllm-project/vllm commit
4d51588e2381018348f1022dfa3a7698899805b7, "[Feat] DeepSeek V4 Rebased (#40860)", module
vllm/tokenizers/deepseek_v4_encoding.py, Apache-2.0; DeepSeek's encoding_dsv4.py with the reasoning field named
"reasoning"). It is not copied here: the module is imported from an installed vllm (PyPI) that has it, or
loaded from --encoder PATH (that file from a vLLM checkout).

Vectors use deepinfer's message schema (OpenAI names: reasoning_content, tool_calls[].function.arguments as
JSON text, tool_call_id). `options.tools` follows vLLM's DeepSeek-V4 tokenizer wrapper
(vllm/tokenizers/deepseek_v4.py): a system message carrying the tools is inserted first.

Run: python tools/tokenizer_make_chat_vectors.py [--encoder PATH/TO/deepseek_v4_encoding.py]
"""
import copy
import json
import sys
from pathlib import Path


def load_reference():
    if "--encoder" in sys.argv:
        import importlib.util
        path = sys.argv[sys.argv.index("--encoder") + 1]
        spec = importlib.util.spec_from_file_location("deepseek_v4_encoding", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    try:
        from vllm.tokenizers import deepseek_v4_encoding  # noqa: E402
        return deepseek_v4_encoding
    except ImportError:
        sys.exit("tokenizer_make_chat_vectors: install a vllm that has vllm/tokenizers/deepseek_v4_encoding.py, "
                 "or pass --encoder PATH to that file")


ref = load_reference()

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "tokenizer"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "搜索网页 (search the web) — returns JSON \"results\".",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "top_k": {"type": "number", "default": 5.0, "minimum": 0.5, "exclusiveMaximum": 1e-07},
        "filters": {"type": "object", "properties": {"site": {"type": "string"}, "recent": {"type": "boolean"}}}},
        "required": ["query"], "additionalProperties": False}}}
NO_ARGS = {"type": "function", "function": {"name": "now", "description": "Current time.\nNo arguments.",
                                            "parameters": {"type": "object", "properties": {}}}}


def call(cid, name, args):
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": text}}


def to_reference(messages, tools):
    """deepinfer schema -> the reference encoder's input (vLLM wrapper semantics for `tools`)."""
    out = []
    for m in messages:
        r = copy.deepcopy(m)
        if "reasoning_content" in r:
            r["reasoning"] = r.pop("reasoning_content")
        if "response_format" in r:
            r["response_format"] = json.loads(r["response_format"])
        out.append(r)
    if tools:
        out.insert(0, {"role": "system"})
        out[0]["tools"] = tools
    return out


def conversations():
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    u1 = {"role": "user", "content": "What's the weather in Paris?"}
    a_tc = {"role": "assistant", "content": "", "reasoning_content": "I should call the weather tool.",
            "tool_calls": [call("call_1", "get_weather", {"city": "Paris", "days": 3})]}
    t1 = {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18, \"sky\": \"clear\"}"}
    a_final = {"role": "assistant", "content": "It is 18°C and clear in Paris.", "reasoning_content": "Tool says 18."}
    multi_tc = {"role": "assistant", "content": "Let me check both.", "reasoning_content": "Two lookups.",
                "tool_calls": [call("c_a", "get_weather", {"city": "東京"}), call("c_b", "web_search",
                               {"query": "news \"today\"\n<b>", "top_k": 2.5, "filters": {"site": "x.com", "recent": True},
                                "tags": ["a", 1, None, -0.001, 1e20]})]}
    yield "single_user", [u1], {}
    yield "system_user", [sys_msg, u1], {}
    yield "empty_user", [{"role": "user", "content": ""}], {}
    yield "multi_turn", [sys_msg, u1, {"role": "assistant", "content": "Sunny.", "reasoning_content": "Guess."},
                         {"role": "user", "content": "And tomorrow?"}], {}
    yield "multi_turn_three", [u1, {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
                               {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2", "reasoning_content": "R2"},
                               {"role": "user", "content": "Q3"}], {}
    yield "assistant_last", [u1, {"role": "assistant", "content": "Sunny.", "reasoning_content": "Guess."}], {}
    yield "assistant_prefill_wo_eos", [u1, {"role": "assistant", "content": "Sure, the", "wo_eos": True}], {}
    yield "tools_option", [u1], {"tools": [WEATHER]}
    yield "tools_option_with_system", [sys_msg, u1], {"tools": [WEATHER, SEARCH, NO_ARGS]}
    yield "tools_on_system_message", [dict(sys_msg, tools=[SEARCH]), u1], {}
    yield "tool_round_trip", [sys_msg, u1, a_tc, t1], {"tools": [WEATHER]}
    yield ("tool_round_trip_final", [sys_msg, u1, a_tc, t1, a_final, {"role": "user", "content": "Thanks! And Rome?"}],
           {"tools": [WEATHER]})
    yield "tool_round_trip_no_tools_defined", [u1, a_tc, t1, a_final, {"role": "user", "content": "ok"}], {}
    yield ("parallel_calls_results_reordered", [u1, multi_tc,
                                                {"role": "tool", "tool_call_id": "c_b", "content": "search results"},
                                                {"role": "tool", "tool_call_id": "c_a", "content": "rainy"}],
           {"tools": [WEATHER, SEARCH]})
    yield "tool_results_then_user_text", [u1, multi_tc, {"role": "tool", "tool_call_id": "c_a", "content": "rainy"},
                                          {"role": "tool", "tool_call_id": "c_b", "content": "r"},
                                          {"role": "user", "content": "Summarise please."}], {"tools": [WEATHER, SEARCH]}
    yield "tool_call_no_args", [u1, {"role": "assistant", "content": "", "tool_calls": [call("n1", "now", {})]},
                                {"role": "tool", "tool_call_id": "n1", "content": "12:00"}], {"tools": [NO_ARGS]}
    yield "tool_call_compact_json_args", [u1, {"role": "assistant", "content": "",
                                               "tool_calls": [call("k", "get_weather", '{"city":"Oslo","days":7,"x":{"y":[1,2.0]}}')]},
                                          {"role": "tool", "tool_call_id": "k", "content": ""}], {}
    yield "consecutive_users", [{"role": "user", "content": "first"}, {"role": "user", "content": "second"}], {}
    yield "developer", [sys_msg, {"role": "developer", "content": "Be terse."}, u1], {}
    yield "developer_last", [{"role": "developer", "content": "Answer in French."}], {}
    yield "developer_with_tools", [{"role": "developer", "content": "Use tools.", "tools": [WEATHER]}, u1], {}
    yield "latest_reminder", [sys_msg, u1, {"role": "latest_reminder", "content": "Today is Monday."}], {}
    yield "response_format", [dict(sys_msg, response_format=json.dumps(
        {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object", "properties": {"x": {"type": "number"}}}}}))
                              , u1], {}
    yield "unicode_and_specials_in_content", [{"role": "user", "content": "你好 👋🏽 <think>not real</think> ｜DSML｜ \\n \"q\""}], {}
    yield "system_only", [sys_msg], {}
    yield "assistant_content_with_reasoning_only", [u1, {"role": "assistant", "content": "", "reasoning_content": "only thinking"},
                                                    {"role": "user", "content": "?"}], {}


def main():
    vectors = []
    for name, messages, extra in conversations():
        for thinking in (False, True):
            for drop in (True, False):
                for effort in (None, "high", "max"):
                    if effort and not thinking:
                        continue
                    if not drop and effort:
                        continue
                    for add_bos in ((True, False) if effort is None and drop and not thinking else (True,)):
                        tools = extra.get("tools")
                        ref_msgs = to_reference(messages, tools)
                        prompt = ref.encode_messages(ref_msgs, thinking_mode="thinking" if thinking else "chat",
                                                     drop_thinking=drop, add_default_bos_token=add_bos,
                                                     reasoning_effort=effort)
                        vectors.append({"name": name, "messages": messages,
                                        "options": {"thinking": thinking, "drop_thinking": drop,
                                                    "reasoning_effort": effort or "", "add_bos": add_bos,
                                                    "tools": tools or []},
                                        "prompt": prompt})
    (OUT / "chat_vectors.json").write_text(json.dumps(vectors, ensure_ascii=False, indent=1) + "\n")
    print(len(vectors), "chat vectors", file=sys.stderr)
    write_dsml_vectors()


def write_dsml_vectors():
    eos, dsml = ref.eos_token, ref.dsml_token
    tc_block = ("\n\n<{d}tool_calls>\n<{d}invoke name=\"get_weather\">\n<{d}parameter name=\"city\" string=\"true\">Paris"
                "</{d}parameter>\n<{d}parameter name=\"days\" string=\"false\">3</{d}parameter>\n</{d}invoke>\n"
                "<{d}invoke name=\"now\">\n</{d}invoke>\n</{d}tool_calls>").format(d=dsml)
    texts = [
        ("chat", "Hello there!" + eos),
        ("chat", "" + eos),
        ("chat", "Multi\nline\n\ncontent with <b>tags</b> and ｜ bars" + eos),
        ("thinking", "Let me think.\nStep 1.</think>The answer is 42." + eos),
        ("thinking", "</think>No reasoning." + eos),
        ("thinking", "Plan: call tool.</think>Checking." + tc_block + eos),
        ("chat", "Checking." + tc_block + eos),
        ("chat", tc_block + eos),
        ("thinking", "r</think>" + tc_block + eos),
        ("chat", ("\n\n<{d}tool_calls>\n<{d}invoke name=\"web_search\">\n<{d}parameter name=\"query\" string=\"true\">"
                  "a \"quoted\"\nmulti-line <x> value 你好</{d}parameter>\n<{d}parameter name=\"filters\" string=\"false\">"
                  "{{\"site\": \"x.com\", \"n\": [1, 2.5, null]}}</{d}parameter>\n</{d}invoke>\n</{d}tool_calls>").format(d=dsml) + eos),
    ]
    vectors = []
    for mode, text in texts:
        parsed = ref.parse_message_from_completion_text(text, thinking_mode=mode)
        vectors.append({"thinking": mode == "thinking", "text": text,
                        "reasoning": parsed["reasoning"], "content": parsed["content"],
                        "tool_calls": [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                                       for c in parsed["tool_calls"]]})
    (OUT / "dsml_vectors.json").write_text(json.dumps(vectors, ensure_ascii=False, indent=1) + "\n")
    print(len(vectors), "dsml vectors", file=sys.stderr)


if __name__ == "__main__":
    main()
