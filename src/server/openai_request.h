// Parsing and validation of OpenAI request bodies (/v1/chat/completions, /v1/completions). Pure functions
// of the body text: every field is type- and range-checked, and a field this server does not implement
// is refused with a 400 naming it, never silently ignored. Fuzzed by tests/server/fuzz_openai_request.cpp
// (libFuzzer target fuzz_requests: tools/run_fuzzers.sh).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/request.h"
#include "deepinfer/tokenizer.h"
#include "server/api_error.h"

namespace di::server {

struct CommonParams {
    std::string model;
    std::optional<int64_t> max_tokens;  // max_tokens or max_completion_tokens
    int64_t min_tokens = 0;             // vLLM's: stop tokens (EOS included) held back before this many
    SamplingOptions sampling;           // logprobs / top_logprobs included
    std::vector<std::string> stop;
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;
    bool skip_special_tokens = true;
    int n = 1;
    bool stream = false;
    bool include_usage = false;   // stream_options.include_usage
    OutputConstraint constraint;  // response_format json_object / json_schema (structured output)
    std::string cache_salt;       // Request::cache_salt
    bool echo = false;  // completions: the prompt comes back before the completion (max_tokens may be 0)
    std::optional<int>
        prompt_logprobs;  // vLLM's: each prompt token's logprob, rank and this many alternatives
};

struct ChatRequest {
    CommonParams p;
    std::vector<ChatMessage> messages;
    std::vector<std::string> tools;  // OpenAI tool objects as JSON text; empty when tool_choice is "none"
    std::optional<ToolCallDemand>
        tool_demand;               // tool_choice "required" / named, or parallel_tool_calls false
    bool thinking = false;         // chat_template_kwargs.thinking or thinking.type == "enabled"
    std::string reasoning_effort;  // "", "high", "max"
};

struct CompletionRequest {
    CommonParams p;
    std::vector<std::string> prompt_texts;               // one per prompt, or
    std::vector<std::vector<int32_t>> prompt_token_ids;  // token-id prompts
};

ApiResult<ChatRequest> parse_chat_request(std::string_view body);

// The tool demand of a chat request once its tools are read (OpenAI's tool_choice and Anthropic's share it):
// kRequired and kForced need tools, and kForced a tool of that name (`forced_found`); kAtMostOne applies only
// when there are tools. Errors name tool_choice.
std::optional<ApiError> settle_tool_demand(ChatRequest& r, const ToolCallDemand& wanted, bool forced_found);
ApiResult<CompletionRequest> parse_completion_request(std::string_view body);

}  // namespace di::server
