// JSON pieces of OpenAI responses shared by the chat and completion routes: ids, usage, logprobs, SSE
// framing.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deepinfer/request.h"
#include "deepinfer/tokenizer.h"

namespace di::server {

using json = nlohmann::json;

// "chatcmpl-<24 hex>", unique per process; OpenAI spells tool-call ids "call_<hex>" (sep = '_').
std::string make_id(const char* prefix, char sep = '-');
int64_t unix_time();
// cached_tokens: of the prompt, restored from the prefix cache (OpenAI's prompt_tokens_details).
json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);
std::string sse(const json& j);  // "data: <json>\n\n"
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// End of an SSE stream: with include_usage a chunk of `base` with empty choices and the usage, then [DONE].
std::string sse_stream_end(json base, bool include_usage, int64_t prompt_tokens, int64_t completion_tokens,
                           int64_t cached_tokens);

// Sum of completion_tokens over a request's choices.
template <class Choice>
int64_t total_completion_tokens(const std::vector<Choice>& choices) {
    int64_t n = 0;
    for (const auto& c : choices) n += c.completion_tokens;
    return n;
}

// The text a token stands for in logprobs (its raw bytes, invalid UTF-8 replaced by U+FFFD).
std::string token_piece(const Tokenizer* tok, int32_t id);
// vLLM's prompt_logprobs: null for the prompt's first token, then for each later one an object keyed by
// token id: {logprob, rank, decoded_token} of the token itself and of its k best alternatives (ranks 1..k).
json prompt_logprobs_json(const Tokenizer* tok, const std::vector<GeneratedToken>& entries, int k);

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]} entries for `tokens`.
json chat_logprob_entries(const Tokenizer* tok, const std::vector<GeneratedToken>& tokens);

// Completions: appends to {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
void append_completion_logprobs(json& lp, const Tokenizer* tok, const std::vector<GeneratedToken>& tokens,
                                int64_t& text_offset);
json empty_completion_logprobs();

// OpenAI finish_reason for a finished event ("stop", "length"; "tool_calls" when `tool_calls`).
const char* api_finish_reason(FinishReason r, bool tool_calls);

}  // namespace di::server
