#include "runtime/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace di::runtime {

int64_t StepPlan::n_tokens() const {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.n_tokens;
    return n;
}

Scheduler::Scheduler(const SchedulerConfig& cfg) : cfg_(cfg) {
    DI_CHECK(cfg.max_running >= 1 && cfg.prefill_chunk >= 1 && cfg.step_token_budget >= 1,
             "scheduler config: max_running {}, prefill_chunk {}, step_token_budget {}", cfg.max_running,
             cfg.prefill_chunk, cfg.step_token_budget);
}

Status Scheduler::add(const SeqDemand& d) {
    DI_CHECK(d.n_prompt >= 1 && d.bytes >= 0, "sequence {}: n_prompt {}, bytes {}", d.id, d.n_prompt,
             d.bytes);
    if (d.bytes > cfg_.memory_budget_bytes)
        return make_error(ErrorCode::kOutOfRange,
                          "the request needs {} bytes of sequence state, more than the server's whole state "
                          "memory ({} bytes)",
                          d.bytes, cfg_.memory_budget_bytes);
    if (waiting_.size() >= cfg_.max_waiting)
        return make_error(ErrorCode::kCapacity, "the request queue is full ({} waiting)", waiting_.size());
    waiting_.push_back(Seq{d, 0});
    return ok_status();
}

bool Scheduler::reserve_cached(int64_t bytes) {
    DI_CHECK(bytes >= 0, "cached bytes {}", bytes);
    if (bytes > cfg_.memory_budget_bytes - bytes_in_use_ - bytes_cached_) return false;
    bytes_cached_ += bytes;
    return true;
}

void Scheduler::release_cached(int64_t bytes) {
    DI_CHECK(bytes >= 0 && bytes <= bytes_cached_, "releasing {} cached bytes of {}", bytes, bytes_cached_);
    bytes_cached_ -= bytes;
}

StepPlan Scheduler::plan(const AdmissionHooks& hooks) {
    StepPlan p;
    // Admission: FCFS; the head waits (and blocks those behind it) until memory and a batch slot free up,
    // so a large request is never starved by a stream of small ones. Cached memory gives way to it. A
    // deferred one keeps its place while those behind it go ahead.
    for (auto it = waiting_.begin(); it != waiting_.end() && int(running_.size()) < cfg_.max_running;) {
        Seq s = *it;
        if (hooks.defer && hooks.defer(s.d.id)) {
            ++it;
            continue;
        }
        auto room = [&] { return cfg_.memory_budget_bytes - bytes_in_use_ - bytes_cached_; };  // >= 0
        if (s.d.bytes > room() && hooks.reclaim && bytes_cached_ > 0)
            release_cached(hooks.reclaim(s.d.bytes - room()));
        if (s.d.bytes > room()) break;
        bytes_in_use_ += s.d.bytes;
        if (hooks.prefilled) {
            s.n_fed = hooks.prefilled(s.d.id);
            DI_CHECK(s.n_fed >= 0 && s.n_fed < s.d.n_prompt && s.n_fed % cfg_.prefill_chunk == 0,
                     "sequence {}: {} tokens prefilled of a {}-token prompt (chunk {})", s.d.id, s.n_fed,
                     s.d.n_prompt, cfg_.prefill_chunk);
        }
        p.admitted.push_back(s.d.id);
        running_.push_back(s);
        it = waiting_.erase(it);
    }
    // Every decoding sequence advances one token per step: decodes are never starved by prefills.
    int64_t budget = cfg_.step_token_budget;
    for (const Seq& s : running_) {
        if (!s.decoding()) continue;
        p.chunks.push_back(ScheduledChunk{s.d.id, s.n_fed, 1, true, true});
        --budget;
    }
    // Prefill chunks in admission order while the budget lasts; at least one per step so prefills progress
    // even when decodes fill the budget.
    bool any_prefill = false;
    for (const Seq& s : running_) {
        if (s.decoding()) continue;
        const int64_t boundary = (s.n_fed / cfg_.prefill_chunk + 1) * cfg_.prefill_chunk;
        const int64_t len = std::min(boundary, s.d.n_prompt) - s.n_fed;
        if (any_prefill && len > budget) break;
        const bool last = s.n_fed + len == s.d.n_prompt;
        p.chunks.push_back(ScheduledChunk{s.d.id, s.n_fed, len, false, last});
        budget -= len;
        any_prefill = true;
    }
    return p;
}

void Scheduler::complete(const StepPlan& plan) {
    for (const ScheduledChunk& c : plan.chunks) {
        auto it =
            std::find_if(running_.begin(), running_.end(), [&](const Seq& s) { return s.d.id == c.id; });
        if (it == running_.end()) continue;  // removed while the step ran
        DI_CHECK(it->n_fed == c.start, "sequence {}: chunk starts at {}, state holds {}", c.id, c.start,
                 it->n_fed);
        it->n_fed += c.n_tokens;
    }
}

bool Scheduler::remove(uint64_t id) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const Seq& s) { return s.d.id == id; });
    if (it != running_.end()) {
        bytes_in_use_ -= it->d.bytes;
        running_.erase(it);
        return true;
    }
    auto w = std::find_if(waiting_.begin(), waiting_.end(), [&](const Seq& s) { return s.d.id == id; });
    if (w == waiting_.end()) return false;
    waiting_.erase(w);
    return true;
}

}  // namespace di::runtime
