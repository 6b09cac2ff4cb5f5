#include "server/generation.h"

#include <fmt/format.h>

#include <algorithm>

namespace di::server {

Generation::~Generation() { cancel(); }

void Generation::cancel() {
    for (size_t i = 0; i < streams_.size(); ++i)
        if (!finished_[i]) streams_[i]->cancel();
}

bool Generation::done() const {
    for (bool f : finished_)
        if (!f) return false;
    return true;
}

ApiResult<Generation> Generation::start(ServerContext& ctx, const CommonParams& p,
                                        const std::vector<std::vector<int32_t>>& prompts) {
    const ModelInfo& info = ctx.engine.info();
    std::vector<Request> reqs;
    for (const auto& prompt : prompts) {
        const int64_t n_prompt = int64_t(prompt.size());
        if (n_prompt == 0) return bad_request("the prompt encodes to no tokens", "prompt");
        if (n_prompt >= info.max_context)
            return bad_request(
                fmt::format("the prompt has {} tokens; this model's context limit is {} tokens "
                            "(prompt plus at least one generated token)",
                            n_prompt, info.max_context),
                "messages", "context_length_exceeded");
        int64_t max_tokens = 0;
        if (p.max_tokens) {
            max_tokens = *p.max_tokens;
            if (max_tokens > info.max_context - n_prompt)  // a difference: the sum can overflow
                return bad_request(
                    fmt::format("the prompt ({} tokens) plus max_tokens ({}) exceeds the context "
                                "limit of {} tokens",
                                n_prompt, max_tokens, info.max_context),
                    "max_tokens", "context_length_exceeded");
        } else {
            max_tokens = std::min(ctx.opt.default_max_tokens, info.max_context - n_prompt);
        }
        for (int i = 0; i < p.n; ++i) {
            Request r;
            r.prompt = prompt;
            r.sampling = p.sampling;
            if (r.sampling.seed) r.sampling.seed = *r.sampling.seed + uint64_t(i);
            r.stop.max_tokens = max_tokens;
            r.stop.min_tokens = std::min(p.min_tokens, max_tokens);  // the default max_tokens caps it too
            r.stop.stop = p.stop;
            r.stop.stop_token_ids = p.stop_token_ids;
            r.stop.ignore_eos = p.ignore_eos;
            r.stop.skip_special = p.skip_special_tokens;
            r.constraint = p.constraint;
            r.cache_salt = p.cache_salt;
            // echo with logprobs (or max_tokens 0, which scores the prompt) needs the prompt's own logprobs
            r.prompt_logprobs = p.prompt_logprobs.value_or(-1);
            if (p.echo && (p.sampling.logprobs || max_tokens == 0))
                r.prompt_logprobs = std::max(r.prompt_logprobs, p.sampling.top_logprobs);
            reqs.push_back(std::move(r));
        }
        // Usage counts each prompt once, as OpenAI does for n > 1.
    }
    Generation g;
    g.submitted_ = std::chrono::steady_clock::now();
    for (const auto& prompt : prompts) g.prompt_tokens_ += int64_t(prompt.size());
    g.per_prompt_ = size_t(std::max(p.n, 1));
    for (Request& r : reqs) {
        auto s = ctx.engine.submit(std::move(r));
        if (!s) return from_engine_error(s.error());  // g's destructor cancels those already submitted
        g.streams_.push_back(*s);
        g.finished_.push_back(false);
        g.completion_.push_back(0);
        g.cached_.push_back(0);
    }
    return g;
}

std::vector<ChoiceUpdate> Generation::poll(std::chrono::milliseconds wait) {
    std::vector<ChoiceUpdate> out;
    const size_t n = streams_.size();
    auto take = [&](size_t i, std::chrono::milliseconds w) {
        if (finished_[i]) return;
        if (auto e = streams_[i]->next(w)) {
            finished_[i] = e->finished;
            completion_[i] = std::max(completion_[i], e->completion_tokens);
            cached_[i] = std::max(cached_[i], e->cached_tokens);
            if (ttft_s_ < 0 && !e->tokens.empty())
                ttft_s_ =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted_).count();
            out.push_back(ChoiceUpdate{i, std::move(*e)});
        }
    };
    if (n == 1) {
        take(0, wait);
        return out;
    }
    const auto deadline = std::chrono::steady_clock::now() + wait;
    for (;;) {
        for (size_t i = 0; i < n; ++i) take(i, std::chrono::milliseconds(0));
        if (!out.empty() || done() || std::chrono::steady_clock::now() >= deadline) return out;
        // Block briefly on one unfinished choice, rotating, so every choice is heard within a few ms.
        for (size_t k = 0; k < n; ++k) {
            rr_ = (rr_ + 1) % n;
            if (!finished_[rr_]) break;
        }
        take(rr_, std::chrono::milliseconds(5));
        if (!out.empty()) return out;
    }
}

int64_t Generation::cached_tokens() const {
    int64_t n = 0;
    for (size_t at = 0; at < cached_.size(); at += per_prompt_)
        n += *std::max_element(cached_.begin() + ptrdiff_t(at),
                               cached_.begin() + ptrdiff_t(std::min(at + per_prompt_, cached_.size())));
    return n;
}

RequestUsage Generation::usage() const {
    RequestUsage u;
    u.prompt_tokens = prompt_tokens_;
    u.cached_tokens = cached_tokens();
    u.completion_tokens = 0;
    for (int64_t c : completion_) u.completion_tokens += c;
    u.ttft_s = ttft_s_;
    return u;
}

ApiError finish_error(const RequestEvent& e) {
    switch (e.reason) {
        case FinishReason::kTimeout:
            return ApiError{504, "the request timed out: " + e.error, "", "timeout"};
        case FinishReason::kCancelled:
            return ApiError{503, "the request was cancelled: " + e.error, "", "cancelled"};
        default:
            return ApiError{500, "generation failed: " + e.error, "", "engine_error"};
    }
}

}  // namespace di::server
