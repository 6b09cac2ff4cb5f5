// libFuzzer entry for the OpenAI and Anthropic request parsers (target fuzz_requests in tests/fuzz, built by
// tools/run_fuzzers.sh with clang), then the prompt rendering and tool-call grammar of what parses: nothing
// may crash or throw, and every refusal is a 4xx with a one-line message.
// The same function runs in protocol_test.cpp over a deterministic mutation corpus, so every build exercises
// it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include "deepinfer/tokenizer.h"
#include "server/anthropic_request.h"
#include "server/openai_request.h"

namespace {
// A refusal is a client error with a message of one line (it becomes an HTTP 4xx and a log line), and no
// parser threw on the way (refuse_exceptions turns that into a 400 for clients; here it is a missed check).
template <typename T>
void check(const di::server::ApiResult<T>& r) {
    if (const auto* e = std::get_if<di::server::ApiError>(&r)) {
        if (e->status < 400 || e->status > 499 || e->message.empty() ||
            e->message.find('\n') != std::string::npos || e->code == "unexpected_structure") {
            std::fprintf(stderr, "bad refusal: %d '%s'\n", e->status, e->message.c_str());
            std::abort();
        }
    }
}

// What the chat routes do next with a parsed request: render the prompt (tools, thinking, both ways of
// reading special-token text) and, for a tool demand, build the tool-call grammar. Errors are one line;
// nothing throws.
void render(const di::server::ApiResult<di::server::ChatRequest>& parsed) {
    const auto* r = std::get_if<di::server::ChatRequest>(&parsed);
    if (r == nullptr) return;
    auto one_line = [](const di::Error& e) {
        if (e.message.empty() || e.message.find('\n') != std::string::npos) {
            std::fprintf(stderr, "bad error: '%s'\n", e.message.c_str());
            std::abort();
        }
    };
    for (bool split : {false, true}) {
        di::ChatOptions o;
        o.thinking = r->thinking;
        o.reasoning_effort = r->reasoning_effort;
        o.tools = r->tools;
        o.split_special_tokens = split;
        auto prompt = di::encode_chat_prompt(r->messages, o);
        if (!prompt.ok()) one_line(prompt.error());
    }
    if (r->tool_demand) {
        auto grammar = di::dsml_tool_call_grammar(r->tools, *r->tool_demand);
        if (!grammar.ok()) one_line(grammar.error());
    }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    const auto chat = di::server::parse_chat_request(body);
    check(chat);
    render(chat);
    check(di::server::parse_completion_request(body));
    const auto messages = di::server::parse_messages_request(body);
    check(messages);
    render(messages);
    return 0;
}
