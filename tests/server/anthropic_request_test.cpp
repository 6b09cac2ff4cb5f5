// Anthropic Messages request parsing: blocks land in the chat messages the encoder takes (tool results as
// tool messages before the user's text, tool_use as tool calls, thinking as reasoning), tools become
// OpenAI tool objects, and every bad field is a 400 naming it.
#include "server/anthropic_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace di::server {
namespace {

ChatRequest ok(const std::string& body) {
    auto r = parse_messages_request(body);
    if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message << " in " << body;
    return std::holds_alternative<ChatRequest>(r) ? std::get<ChatRequest>(r) : ChatRequest{};
}

TEST(AnthropicRequest, BlocksBecomeChatMessages) {
    const ChatRequest r =
        ok(R"({"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "be brief"}],
      "stop_sequences": ["END"], "stream": true, "temperature": 0.5, "top_k": 4,
      "thinking": {"type": "enabled", "budget_tokens": 2048}, "metadata": {"user_id": "u"},
      "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "auto"},
      "messages": [{"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
          {"type": "text", "text": "checking"},
          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
          "content": [{"type": "text", "text": "sunny"}]}, {"type": "text", "text": "tomorrow?"}]}]})");
    EXPECT_EQ(r.p.max_tokens, 9);
    EXPECT_EQ(r.p.stop, std::vector<std::string>{"END"});
    EXPECT_TRUE(r.p.stream);
    EXPECT_TRUE(r.thinking);
    EXPECT_EQ(r.p.sampling.top_k, 4);
    ASSERT_EQ(r.messages.size(), 5u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[0].content, "be brief");
    EXPECT_EQ(r.messages[2].role, "assistant");
    EXPECT_EQ(r.messages[2].reasoning_content, "hm");
    EXPECT_EQ(r.messages[2].content, "checking");
    ASSERT_EQ(r.messages[2].tool_calls.size(), 1u);
    EXPECT_EQ(r.messages[2].tool_calls[0].id, "toolu_1");
    EXPECT_EQ(nlohmann::json::parse(r.messages[2].tool_calls[0].arguments),
              nlohmann::json({{"city", "Paris"}}));
    EXPECT_EQ(r.messages[3].role, "tool");
    EXPECT_EQ(r.messages[3].tool_call_id, "toolu_1");
    EXPECT_EQ(r.messages[3].content, "sunny");
    EXPECT_EQ(r.messages[4].role, "user");
    EXPECT_EQ(r.messages[4].content, "tomorrow?");
    ASSERT_EQ(r.tools.size(), 1u);
    const auto tool = nlohmann::json::parse(r.tools[0]);
    EXPECT_EQ(tool["type"], "function");
    EXPECT_EQ(tool["function"]["name"], "get_weather");
    EXPECT_EQ(tool["function"]["parameters"], nlohmann::json({{"type", "object"}}));
    // A user turn of tool results alone adds no empty user message; tool_choice none drops the tools.
    const ChatRequest t = ok(R"({"model": "m", "max_tokens": 1, "tool_choice": {"type": "none"},
      "tools": [{"name": "f", "input_schema": {}}], "messages": [{"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "a", "content": "x"}]}]})");
    ASSERT_EQ(t.messages.size(), 1u);
    EXPECT_EQ(t.messages[0].role, "tool");
    EXPECT_TRUE(t.tools.empty());
}

TEST(AnthropicRequest, ToolChoiceBecomesADemand) {
    const std::string base =
        R"({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}],
      "tools": [{"name": "f", "input_schema": {}}, {"name": "g", "input_schema": {}}], )";
    const ChatRequest any = ok(base + R"("tool_choice": {"type": "any"}})");
    ASSERT_TRUE(any.tool_demand.has_value());
    EXPECT_EQ(any.tool_demand->mode, ToolCallDemand::Mode::kRequired);
    EXPECT_TRUE(any.tool_demand->parallel);
    const ChatRequest one =
        ok(base + R"("tool_choice": {"type": "any", "disable_parallel_tool_use": true}})");
    ASSERT_TRUE(one.tool_demand.has_value());
    EXPECT_FALSE(one.tool_demand->parallel);
    const ChatRequest named = ok(base + R"("tool_choice": {"type": "tool", "name": "g"}})");
    ASSERT_TRUE(named.tool_demand.has_value());
    EXPECT_EQ(named.tool_demand->mode, ToolCallDemand::Mode::kForced);
    EXPECT_EQ(named.tool_demand->forced, "g");
    const ChatRequest single =
        ok(base + R"("tool_choice": {"type": "auto", "disable_parallel_tool_use": true}})");
    ASSERT_TRUE(single.tool_demand.has_value());
    EXPECT_EQ(single.tool_demand->mode, ToolCallDemand::Mode::kAtMostOne);
    EXPECT_FALSE(ok(base + R"("tool_choice": {"type": "auto"}})").tool_demand.has_value());
}

TEST(AnthropicRequest, BadFieldsAreRefusedByName) {
    const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{" + msgs + R"(, "model": "m"})", "max_tokens"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 0})", "max_tokens"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": "5"})", "max_tokens"},
        {R"({"model": "m", "max_tokens": 5})", "messages"},
        {R"({"model": "m", "max_tokens": 5, "messages": []})", "messages"},
        {"{" + msgs + R"(, "max_tokens": 5})", "model"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "temperature": 1.5})", "temperature"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "top_p": 0})", "top_p"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "stop_sequences": "x"})", "stop_sequences"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "stop_sequences": [""]})", "stop_sequences"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "system": 3})", "system"},
        // a block type that is not a string: nlohmann's value("type", "") threw here (a 500 before)
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "system": [{"type": {"t": 1}}]})", "system[0]"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "tool_choice": {"type": "any"}})", "tool_choice"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "tool_choice": {"type": "sometimes"}})",
         "tool_choice"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "tool_choice": {"type": "tool"},
             "tools": [{"name": "f", "input_schema": {}}]})",
         "tool_choice"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "tool_choice": {"type": "tool", "name": "g"},
             "tools": [{"name": "f", "input_schema": {}}]})",
         "tool_choice"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "tools": [{"name": "f"}]})",
         "tools[0].input_schema"},
        {"{" + msgs +
             R"(, "model": "m", "max_tokens": 5, "tools": [{"type": "bash_20250124", "name": "bash", "input_schema": {}}]})",
         "tools[0].type"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "thinking": {"type": "on"}})", "thinking"},
        {"{" + msgs + R"(, "model": "m", "max_tokens": 5, "frobnicate": 1})", "frobnicate"},
        {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})",
         "messages[0].role"},
        {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user"}]})", "messages[0].content"},
        {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]})",
         "messages[0].content[0]"},
        {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]})",
         "messages[0].content[0]"},
        {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": []}]}]})",
         "messages[0].content[0]"},
        {R"({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})",
         "messages[0].content[0]"},
        {"not json", ""},
    };
    for (const auto& [body, param] : cases) {
        auto r = parse_messages_request(body);
        ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << body;
        const ApiError& e = std::get<ApiError>(r);
        EXPECT_EQ(e.status, 400) << body;
        EXPECT_EQ(e.param, param) << body << ": " << e.message;
        EXPECT_EQ(e.to_anthropic_json()["error"]["type"], "invalid_request_error");
    }
}

}  // namespace
}  // namespace di::server
