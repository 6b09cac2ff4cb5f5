// deepinfer engine requests: what a caller submits (prompt token ids, sampling, stop conditions) and what
// comes back (a stream of events with new tokens and text, ending with one that says why it finished).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace di {

struct SamplingOptions {
    float temperature = 1.0f;  // 0 = greedy (ties: lowest id)
    int top_k = 0;             // 0 = off
    float top_p = 1.0f;        // 1 = off
    float min_p = 0.0f;        // 0 = off
    float repetition_penalty = 1.0f;
    float presence_penalty = 0.0f;  // OpenAI semantics, on generated tokens
    float frequency_penalty = 0.0f;
    std::optional<uint64_t> seed;  // none: the engine draws one
    bool logprobs = false;         // report each token's logprob
    int top_logprobs = 0;          // and this many alternatives (0-20)
};

struct StopOptions {
    int64_t max_tokens = 16;              // new tokens, >= 1 (0 with Request::prompt_logprobs)
    int64_t min_tokens = 0;               // stop tokens (EOS included) cannot be sampled before this many
    std::vector<std::string> stop;        // stop strings: output ends before the first match (not returned)
    std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS
    bool ignore_eos = false;
    bool skip_special = true;  // special tokens add no text
};

// Structured output: the generated text must match a JSON schema (or be any JSON object). Applied by the
// engine as a mask over the vocabulary at every step (xgrammar), so the output parses and validates whatever
// the model's logits say; a request cut short by max_tokens ends with finish reason "length", incomplete.
struct OutputConstraint {
    enum class Kind { kNone, kJsonObject, kJsonSchema, kStructuralTag };
    Kind kind = Kind::kNone;
    std::string json_schema;     // kJsonSchema: the schema as JSON text
    std::string structural_tag;  // kStructuralTag: an xgrammar structural tag (dsml_tool_call_grammar)
    int32_t after_token = -1;    // >= 0: the constraint starts once this token was generated (the end of the
                                 // reasoning, "</think>"); -1: from the first generated token
};

struct Request {
    std::vector<int32_t> prompt;
    SamplingOptions sampling;
    StopOptions stop;
    OutputConstraint constraint;
    std::chrono::milliseconds timeout{0};  // 0: the engine's default
    // Prefix cache namespace: a request only starts from states kept by requests with the same salt, so
    // tenants who do not share one cannot learn from cache hits what others sent.
    std::string cache_salt;
    // >= 0: report each prompt token's logprob (from the second on) with this many alternatives (0-20),
    // computed from every prefill row's logits (the request then never starts from the prefix cache);
    // stop.max_tokens may then be 0 (score the prompt, generate nothing). -1: none.
    int prompt_logprobs = -1;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kTimeout, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "timeout", "error"

struct GeneratedToken {
    int32_t id = 0;
    float logprob = 0;                           // filled when SamplingOptions::logprobs
    std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, best first
    int32_t rank = 0;  // prompt logprobs: 1 + the ids ranked above it (logit, then id); 0: not computed
};

// Progress of one request. Events arrive in order; the last one has `finished` set.
struct RequestEvent {
    std::vector<GeneratedToken> tokens;  // new tokens
    // Request::prompt_logprobs: the next prompt tokens' logprobs, in order from the prompt's second token
    std::vector<GeneratedToken> prompt_logprobs;
    std::string text;  // new text: whole UTF-8 characters, stop strings cut off
    bool finished = false;
    FinishReason reason = FinishReason::kNone;
    std::string error;  // kError / kTimeout: what happened
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;      // of the prompt, restored from the prefix cache instead of prefilled
    int64_t completion_tokens = 0;  // generated so far (includes a stop token)
};

// The consumer's end of a submitted request, shared by the caller and the engine. Thread-safe.
class RequestStream {
  public:
    explicit RequestStream(uint64_t id) : id_(id) {}
    uint64_t id() const { return id_; }

    // Waits up to `timeout` for news; several queued events come back merged into one. nullopt: nothing yet.
    std::optional<RequestEvent> next(std::chrono::milliseconds timeout);
    // Asks the engine to stop this request and free its state (it then sends a kCancelled event).
    void cancel() { cancelled_.store(true); }
    bool cancel_requested() const { return cancelled_.load(); }

    // Engine side.
    void push(RequestEvent e);

  private:
    uint64_t id_;
    std::atomic<bool> cancelled_{false};
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<RequestEvent> events_;
};

}  // namespace di
