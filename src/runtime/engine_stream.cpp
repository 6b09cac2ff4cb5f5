// RequestStream (the consumer's end of a request), Histogram and finish-reason names.
#include <algorithm>

#include "deepinfer/engine.h"
#include "deepinfer/request.h"

namespace di {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kNone:
            return "none";
        case FinishReason::kStop:
            return "stop";
        case FinishReason::kLength:
            return "length";
        case FinishReason::kCancelled:
            return "cancelled";
        case FinishReason::kTimeout:
            return "timeout";
        case FinishReason::kError:
            return "error";
    }
    return "unknown";
}

void RequestStream::push(RequestEvent e) {
    {
        std::lock_guard lk(mu_);
        events_.push_back(std::move(e));
    }
    cv_.notify_all();
}

std::optional<RequestEvent> RequestStream::next(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return std::nullopt;
    RequestEvent out = std::move(events_.front());
    events_.pop_front();
    // A slow consumer gets everything that piled up at once.
    while (!events_.empty() && !out.finished) {
        RequestEvent& e = events_.front();
        for (auto& t : e.tokens) out.tokens.push_back(std::move(t));
        for (auto& t : e.prompt_logprobs) out.prompt_logprobs.push_back(std::move(t));
        out.text += e.text;
        out.finished = e.finished;
        out.reason = e.reason;
        out.error = std::move(e.error);
        out.prompt_tokens = e.prompt_tokens;
        out.cached_tokens = e.cached_tokens;
        out.completion_tokens = e.completion_tokens;
        events_.pop_front();
    }
    return out;
}

Histogram Histogram::latency_seconds() {
    Histogram h;
    h.bounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
    h.counts.assign(h.bounds.size() + 1, 0);
    return h;
}

void Histogram::observe(double v) {
    const size_t i = size_t(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
    ++counts[i];
    sum += v;
    ++count;
}

}  // namespace di
