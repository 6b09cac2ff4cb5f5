// OpenAI request parsing: accepted fields land in the right place, every bad field is a 400 naming it,
// and the parsers survive a deterministic mutation fuzz of valid requests (the fuzz target's entry point).
#include <gtest/gtest.h>

#include <random>

#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace di::server {
namespace {

const char* kChat = R"({"model": "m", "messages": [{"role": "system", "content": "be brief"},
  {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
  "max_tokens": 7, "min_tokens": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 3, "stop": ["x", "yz"],
  "n": 2, "presence_penalty": 0.1, "frequency_penalty": -0.2, "logprobs": true, "top_logprobs": 2,
  "stream": true, "stream_options": {"include_usage": true},
  "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
  "tool_choice": "auto", "chat_template_kwargs": {"thinking": true}, "reasoning_effort": "high", "user": "u1"})";

ApiError chat_error(const std::string& body) {
    auto r = parse_chat_request(body);
    EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

std::string with(const std::string& extra) {
    return R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], )" + extra + "}";
}

TEST(Protocol, ChatFieldsAreParsed) {
    auto r = parse_chat_request(kChat);
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
    const ChatRequest& c = std::get<ChatRequest>(r);
    EXPECT_EQ(c.p.model, "m");
    ASSERT_EQ(c.messages.size(), 2u);
    EXPECT_EQ(c.messages[1].content, "hi there");
    EXPECT_EQ(*c.p.max_tokens, 7);
    EXPECT_EQ(c.p.min_tokens, 2);
    EXPECT_FLOAT_EQ(c.p.sampling.temperature, 0.5f);
    EXPECT_EQ(c.p.sampling.top_k, 40);
    EXPECT_EQ(*c.p.sampling.seed, 3u);
    EXPECT_EQ(c.p.stop, (std::vector<std::string>{"x", "yz"}));
    EXPECT_EQ(c.p.n, 2);
    EXPECT_TRUE(c.p.sampling.logprobs);
    EXPECT_EQ(c.p.sampling.top_logprobs, 2);
    EXPECT_TRUE(c.p.stream && c.p.include_usage);
    ASSERT_EQ(c.tools.size(), 1u);
    EXPECT_NE(c.tools[0].find("get_weather"), std::string::npos);
    EXPECT_TRUE(c.thinking);
    EXPECT_EQ(c.reasoning_effort, "high");
}

TEST(Protocol, ToolChoiceNoneDropsTools) {
    auto r = parse_chat_request(
        with(R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none")"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(r));
    EXPECT_TRUE(std::get<ChatRequest>(r).tools.empty());
}

TEST(Protocol, AssistantToolCallsAndToolResults) {
    auto r = parse_chat_request(R"({"model": "m", "messages": [{"role": "user", "content": "w?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]})");
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(r)) << std::get<ApiError>(r).message;
    const auto& m = std::get<ChatRequest>(r).messages;
    ASSERT_EQ(m[1].tool_calls.size(), 1u);
    EXPECT_EQ(m[1].tool_calls[0].name, "get_weather");
    EXPECT_EQ(m[1].tool_calls[0].arguments, R"({"city": "Paris"})");
    EXPECT_EQ(m[2].tool_call_id, "c1");
}

TEST(Protocol, BadFieldsAreRefusedByName) {
    struct Case {
        std::string body, param;
    };
    const std::vector<Case> cases = {
        {"{", ""},
        {"[1, 2]", ""},
        {R"({"messages": [{"role": "user", "content": "hi"}]})", "model"},
        {R"({"model": "m"})", "messages"},
        {R"({"model": "m", "messages": []})", "messages"},
        {R"({"model": "m", "messages": "hi"})", "messages"},
        {R"({"model": "m", "messages": [{"role": "wizard", "content": "hi"}]})", "messages[0].role"},
        {R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
         "messages[0].content"},
        {R"({"model": "m", "messages": [{"role": "tool", "content": "x"}]})", "messages[0]"},
        {with(R"("temperature": "hot")"), "temperature"},
        {with(R"("temperature": 3)"), "temperature"},
        {with(R"("max_tokens": 0)"), "max_tokens"},
        {with(R"("max_tokens": -5)"), "max_tokens"},
        {with(R"("min_tokens": -1)"), "min_tokens"},
        {with(R"("min_tokens": 9, "max_tokens": 3)"), "min_tokens"},
        {with(R"("max_tokens": 1.5)"), "max_tokens"},
        {with(R"("max_completion_tokens": 0)"), "max_tokens"},
        {with(R"("top_p": 0)"), "top_p"},
        {with(R"("n": 0)"), "n"},
        {with(R"("stop": 5)"), "stop"},
        {with(R"("stop": [""])"), "stop"},
        {with(R"("stream": "yes")"), "stream"},
        {with(R"("stream_options": {"include_usage": true})"), "stream_options"},
        {with(R"("top_logprobs": 3)"), "top_logprobs"},
        {with(R"("logprobs": true, "top_logprobs": 21)"), "top_logprobs"},
        {with(R"("logit_bias": {"5": 10})"), "logit_bias"},
        {with(R"("tool_choice": "required", "tools": [])"), "tool_choice"},
        {with(R"("tool_choice": "sometimes")"), "tool_choice"},
        // a type that is not a string: nlohmann's value("type", "") threw here (a 500 before)
        {with(R"("tools": [{"type": {"x": 1}, "function": {"name": "f"}}])"), "tools[0]"},
        // a field named with a newline, a role holding one: quoted as one line
        {with("\"a\\nb\": 1"), "a?b"},
        {R"({"model": "m", "messages": [{"role": "us\ner", "content": "x"}]})", "messages[0].role"},
        {with(
             R"("tool_choice": {"type": "function"}, "tools": [{"type": "function", "function": {"name": "f"}}])"),
         "tool_choice"},
        {with(R"("tool_choice": {"type": "function", "function": {"name": "g"}},
                 "tools": [{"type": "function", "function": {"name": "f"}}])"),
         "tool_choice"},
        {with(R"("tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f"}}],
                 "response_format": {"type": "json_object"})"),
         "response_format"},
        {with(R"("parallel_tool_calls": "no")"), "parallel_tool_calls"},
        {with(R"("tools": [{"type": "retrieval"}])"), "tools[0]"},
        {with(R"("response_format": "json")"), "response_format"},
        {with(R"("response_format": {"type": "xml"})"), "response_format"},
        {with(R"("response_format": {})"), "response_format"},
        {with(R"("response_format": {"type": 3})"), "type"},
        {with(R"("response_format": {"type": "json_schema"})"), "response_format"},
        {with(R"("response_format": {"type": "json_schema", "json_schema": []})"),
         "response_format.json_schema"},
        {with(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})"),
         "response_format"},
        {with(R"("response_format": {"type": "json_schema", "json_schema": {"schema": 5}})"),
         "response_format.json_schema.schema"},
        {with(
             R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}})"),
         "strict"},
        {with(R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "colour": 1}})"),
         "colour"},
        {with(R"("response_format": {"type": "json_object", "schema": {}})"), "schema"},
        {with(R"("reasoning_effort": "low")"), "reasoning_effort"},
        {with(R"("frobnicate": 1)"), "frobnicate"},
        {with(R"("seed": "x")"), "seed"},
    };
    for (const Case& c : cases) {
        ApiError e = chat_error(c.body);
        EXPECT_EQ(e.status, 400) << c.body;
        EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
        EXPECT_FALSE(e.message.empty());
        EXPECT_EQ(e.message.find('\n'), std::string::npos) << e.message;
        EXPECT_NE(e.code, "unexpected_structure") << c.body << " -> " << e.message;
    }
}

TEST(Protocol, ToolChoiceBecomesADemand) {
    const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}},
                                           {"type": "function", "function": {"name": "g"}}])";
    auto required = parse_chat_request(with(tools + R"(, "tool_choice": "required")"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(required)) << std::get<ApiError>(required).message;
    const auto& rd = std::get<ChatRequest>(required).tool_demand;
    ASSERT_TRUE(rd.has_value());
    EXPECT_EQ(rd->mode, ToolCallDemand::Mode::kRequired);
    EXPECT_TRUE(rd->parallel);
    auto named = parse_chat_request(
        with(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}})"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(named));
    const auto& nd = std::get<ChatRequest>(named).tool_demand;
    ASSERT_TRUE(nd.has_value());
    EXPECT_EQ(nd->mode, ToolCallDemand::Mode::kForced);
    EXPECT_EQ(nd->forced, "g");
    auto single = parse_chat_request(with(tools + R"(, "parallel_tool_calls": false)"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(single));
    ASSERT_TRUE(std::get<ChatRequest>(single).tool_demand.has_value());
    EXPECT_EQ(std::get<ChatRequest>(single).tool_demand->mode, ToolCallDemand::Mode::kAtMostOne);
    auto plain = parse_chat_request(with(tools));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(plain));
    EXPECT_FALSE(std::get<ChatRequest>(plain).tool_demand.has_value());
}

TEST(Protocol, ResponseFormatBecomesAConstraint) {
    auto text = parse_chat_request(with(R"("response_format": {"type": "text"})"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(text));
    EXPECT_EQ(std::get<ChatRequest>(text).p.constraint.kind, OutputConstraint::Kind::kNone);
    auto object = parse_chat_request(with(R"("response_format": {"type": "json_object"})"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(object));
    EXPECT_EQ(std::get<ChatRequest>(object).p.constraint.kind, OutputConstraint::Kind::kJsonObject);
    auto schema =
        parse_chat_request(with(R"("response_format": {"type": "json_schema", "json_schema": {"name": "r",
      "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}})"));
    ASSERT_TRUE(std::holds_alternative<ChatRequest>(schema)) << std::get<ApiError>(schema).message;
    const OutputConstraint& c = std::get<ChatRequest>(schema).p.constraint;
    EXPECT_EQ(c.kind, OutputConstraint::Kind::kJsonSchema);
    EXPECT_EQ(c.json_schema, R"({"properties":{"a":{"type":"integer"}},"type":"object"})");
    EXPECT_EQ(c.after_token, -1);
    auto completion = parse_completion_request(
        R"({"model": "m", "prompt": "x", "response_format": {"type": "json_object"}})");
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(completion));
    EXPECT_EQ(std::get<CompletionRequest>(completion).p.constraint.kind, OutputConstraint::Kind::kJsonObject);
}

TEST(Protocol, CompletionPrompts) {
    auto r = parse_completion_request(R"({"model": "m", "prompt": [[1, 2], [3]], "logprobs": 2})");
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
    const auto& c = std::get<CompletionRequest>(r);
    EXPECT_EQ(c.prompt_token_ids, (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
    EXPECT_EQ(c.p.sampling.top_logprobs, 2);
    auto t = parse_completion_request(R"({"model": "m", "prompt": ["a", "b"]})");
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(t));
    EXPECT_EQ(std::get<CompletionRequest>(t).prompt_texts.size(), 2u);
    auto echo = parse_completion_request(R"({"model": "m", "prompt": "x", "echo": true, "max_tokens": 0})");
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(echo));
    EXPECT_TRUE(std::get<CompletionRequest>(echo).p.echo);
    EXPECT_EQ(std::get<CompletionRequest>(echo).p.max_tokens, 0);
    for (const char* bad :
         {R"({"model": "m"})", R"({"model": "m", "prompt": ""})", R"({"model": "m", "prompt": []})",
          R"({"model": "m", "prompt": [1, -2]})", R"({"model": "m", "prompt": {"a": 1}})",
          R"({"model": "m", "prompt": "x", "echo": true, "stream": true})",
          R"({"model": "m", "prompt": "x", "max_tokens": 0})", R"({"model": "m", "prompt": "x", "echo": 1})",
          R"({"model": "m", "prompt": "x", "messages": []})"}) {
        auto e = parse_completion_request(bad);
        ASSERT_TRUE(std::holds_alternative<ApiError>(e)) << bad;
        EXPECT_EQ(std::get<ApiError>(e).status, 400) << bad;
    }
}

// Deterministic mutation fuzz: byte flips, truncations, insertions of JSON punctuation and type swaps on
// valid requests. The parsers must return (value or error), never crash or throw.
TEST(Protocol, MutationFuzzNeverCrashes) {
    const std::vector<std::string> seeds = {
        kChat, with(R"("stop": "x")"), R"({"model": "m", "prompt": [[1, 2], [3]], "logprobs": 2, "n": 3})",
        R"({"model":"m","prompt":"hello","stream":true})"};
    const std::string tokens[] = {"{",    "}",     "[",  "]",       ",",    ":",   "\"",         "null",
                                  "true", "1e999", "-1", "\\u0000", "\xff", "0.5", "\"\\ud800\""};
    std::mt19937 rng(2024);
    int n = 0;
    for (int it = 0; it < 20000; ++it) {
        std::string s = seeds[rng() % seeds.size()];
        const int edits = 1 + int(rng() % 4);
        for (int k = 0; k < edits && !s.empty(); ++k) {
            const size_t pos = rng() % s.size();
            switch (rng() % 4) {
                case 0:
                    s[pos] = char(rng() % 256);
                    break;
                case 1:
                    s.resize(pos);
                    break;
                case 2:
                    s.insert(pos, tokens[rng() % std::size(tokens)]);
                    break;
                default:
                    s.erase(pos, 1 + rng() % 8);
                    break;
            }
        }
        LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
        ++n;
    }
    EXPECT_EQ(n, 20000);
}

}  // namespace
}  // namespace di::server
