// The engine requests behind one API call (n choices x prompts): submission with per-choice seeds, the
// context-limit and max_tokens rules, polling all streams, and cancelling whatever is unfinished.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "server/access_log.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/server_context.h"

namespace di::server {

struct ChoiceUpdate {
    size_t choice = 0;
    RequestEvent event;
};

class Generation {
  public:
    Generation() = default;
    Generation(Generation&&) = default;
    ~Generation();  // cancels unfinished requests (a disconnected client frees its state)

    // Submits one request per prompt and choice (choice index = prompt * n + i; seeded choices get seed + i).
    static ApiResult<Generation> start(ServerContext& ctx, const CommonParams& p,
                                       const std::vector<std::vector<int32_t>>& prompts);

    // Waits up to `wait` for news from any unfinished choice.
    std::vector<ChoiceUpdate> poll(std::chrono::milliseconds wait);
    bool done() const;
    void cancel();
    size_t n_choices() const { return streams_.size(); }
    int64_t prompt_tokens() const { return prompt_tokens_; }
    // Of those, restored from the engine's prefix cache (per prompt, the most any of its choices had).
    int64_t cached_tokens() const;
    // Tokens so far and the time from submission to the first generated token (the access log).
    RequestUsage usage() const;

  private:
    std::vector<std::shared_ptr<RequestStream>> streams_;
    std::vector<bool> finished_;
    std::vector<int64_t> completion_;  // per choice, generated so far
    std::vector<int64_t> cached_;      // per choice, prompt tokens restored from the prefix cache
    size_t per_prompt_ = 1;            // choices of each prompt (n)
    int64_t prompt_tokens_ = 0;
    size_t rr_ = 0;
    std::chrono::steady_clock::time_point submitted_{};
    double ttft_s_ = -1;
};

// Maps a failed finish (timeout, shutdown, engine error) to the API error a client sees.
ApiError finish_error(const RequestEvent& e);

}  // namespace di::server
