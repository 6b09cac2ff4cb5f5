// Chat output -> OpenAI fields, on the DSML vectors of tests/data/tokenizer/dsml_vectors.json (reasoning,
// content and tool calls produced by DeepSeek's reference parser): fed as engine events in chunks of every
// size, the streamed deltas and the whole message both give the reference fields, and each tool call is an
// OpenAI tool_calls entry (index, id, type "function", name, arguments), streamed as its id and name first
// and then argument pieces.
#include "server/chat_output.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

namespace di::server {
namespace {

using json = nlohmann::json;

TEST(ChatOutput, DsmlVectorsBecomeOpenAiFields) {
    std::ifstream f(std::string(DI_TEST_DATA) + "/tokenizer/dsml_vectors.json");
    const json vectors = json::parse(f);
    ASSERT_GE(vectors.size(), 8u);
    std::mt19937 rng(11);
    int n_calls = 0;
    for (const json& v : vectors) {
        const std::string text = v["text"];
        for (size_t max_chunk : {size_t(1), size_t(3), size_t(1) << 20}) {
            ChatChoice c(v["thinking"].get<bool>());
            std::string streamed_content, streamed_reasoning;
            json streamed_calls = json::array();
            size_t at = 0;
            int64_t n_events = 0;
            while (at < text.size()) {
                const size_t len = std::min(text.size() - at, 1 + rng() % max_chunk);
                RequestEvent e;
                e.text = text.substr(at, len);
                at += len;
                e.completion_tokens = ++n_events;
                e.finished = at == text.size();
                e.reason = e.finished ? FinishReason::kStop : FinishReason::kNone;
                const json d = apply_event(c, e);
                streamed_content += d.value("content", "");
                streamed_reasoning += d.value("reasoning_content", "");
                if (d.contains("tool_calls"))  // joined by index, as OpenAI clients do
                    for (const json& tc : d["tool_calls"]) {
                        const size_t index = tc["index"];
                        if (index == streamed_calls.size()) {
                            EXPECT_TRUE(tc.contains("id") && tc["function"].contains("name"))
                                << "a call starts with its id and name";
                            streamed_calls.push_back(tc);
                        } else {
                            ASSERT_EQ(index + 1, streamed_calls.size()) << "pieces of an earlier call";
                            EXPECT_FALSE(tc.contains("id"));
                            json& fn = streamed_calls[index]["function"];
                            fn["arguments"] = fn["arguments"].get<std::string>() +
                                              tc["function"]["arguments"].get<std::string>();
                        }
                    }
            }
            EXPECT_EQ(c.content, v["content"].get<std::string>()) << text;
            EXPECT_EQ(c.reasoning, v["reasoning"].get<std::string>()) << text;
            EXPECT_EQ(streamed_content, c.content);
            EXPECT_EQ(streamed_reasoning, c.reasoning);
            EXPECT_EQ(c.reason, FinishReason::kStop);
            ASSERT_EQ(c.tool_calls.size(), v["tool_calls"].size()) << text;
            ASSERT_EQ(streamed_calls.size(), v["tool_calls"].size());
            for (size_t i = 0; i < c.tool_calls.size(); ++i) {
                const json& want = v["tool_calls"][i];
                EXPECT_EQ(c.tool_calls[i]["type"], "function");
                EXPECT_EQ(c.tool_calls[i]["function"]["name"], want["name"]);
                EXPECT_EQ(c.tool_calls[i]["function"]["arguments"], want["arguments"]);
                EXPECT_EQ(streamed_calls[i]["index"], i);
                EXPECT_EQ(streamed_calls[i]["id"], c.tool_calls[i]["id"]);
                EXPECT_EQ(c.tool_calls[i]["id"].get<std::string>().rfind("call_", 0),
                          0u);  // OpenAI's spelling
                EXPECT_EQ(streamed_calls[i]["function"], c.tool_calls[i]["function"]);
                ++n_calls;
            }
        }
    }
    EXPECT_GT(n_calls, 0) << "the vectors hold no tool call";
}

}  // namespace
}  // namespace di::server
