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
    DI_CHECK(cfg.max_running >= 1 && cfg.prefill_chunk >= 1 && cfg.step_token_budget >= 1 && cfg.homes >= 1 &&
                 cfg.memory_budget_bytes >= 0,
             "scheduler config: max_running {}, prefill_chunk {}, step_token_budget {}, homes {}, budget {}",
             cfg.max_running, cfg.prefill_chunk, cfg.step_token_budget, cfg.homes, cfg.memory_budget_bytes);
    bins_.resize(size_t(cfg.homes));
    for (Bin& b : bins_) b.budget = cfg.memory_budget_bytes / cfg.homes;
    bins_[0].budget += cfg.memory_budget_bytes % cfg.homes;
}

const Scheduler::Bin& Scheduler::bin(int home) const {
    DI_CHECK(home >= 0 && home < int(bins_.size()), "home {} of {}", home, bins_.size());
    return bins_[size_t(home)];
}

int64_t Scheduler::bytes_in_use() const {
    int64_t n = 0;
    for (const Bin& b : bins_) n += b.in_use;
    return n;
}

int64_t Scheduler::bytes_cached() const {
    int64_t n = 0;
    for (const Bin& b : bins_) n += b.cached;
    return n;
}

int64_t Scheduler::unused(int home) const {
    const Bin& b = bin(home);
    return b.budget - b.in_use - b.cached;  // >= 0
}

int Scheduler::home_of(uint64_t id) const {
    for (const Seq& s : running_)
        if (s.d.id == id) return s.home;
    return -1;
}

Status Scheduler::add(const SeqDemand& d) {
    DI_CHECK(d.n_prompt >= 1 && d.bytes >= 0, "sequence {}: n_prompt {}, bytes {}", d.id, d.n_prompt,
             d.bytes);
    if (d.bytes > bins_[0].budget) {  // home 0's share is the largest
        if (bins_.size() == 1)
            return make_error(ErrorCode::kOutOfRange,
                              "the request needs {} bytes of sequence state, more than the server's whole "
                              "state memory ({} bytes)",
                              d.bytes, cfg_.memory_budget_bytes);
        return make_error(ErrorCode::kOutOfRange,
                          "the request needs {} bytes of sequence state, more than one rank's share of the "
                          "server's state memory ({} of {} bytes over {} ranks: a sequence lives on one)",
                          d.bytes, bins_[0].budget, cfg_.memory_budget_bytes, bins_.size());
    }
    if (waiting_.size() >= cfg_.max_waiting)
        return make_error(ErrorCode::kCapacity, "the request queue is full ({} waiting)", waiting_.size());
    waiting_.push_back(Seq{d, 0});
    return ok_status();
}

bool Scheduler::reserve_cached(int64_t bytes, int home) {
    DI_CHECK(bytes >= 0, "cached bytes {}", bytes);
    if (bytes > unused(home)) return false;
    bin(home).cached += bytes;
    return true;
}

void Scheduler::release_cached(int64_t bytes, int home) {
    Bin& b = bin(home);
    DI_CHECK(bytes >= 0 && bytes <= b.cached, "releasing {} cached bytes of {} (home {})", bytes, b.cached,
             home);
    b.cached -= bytes;
}

StepPlan Scheduler::plan(const AdmissionHooks& hooks) {
    StepPlan p;
    // Admission: FCFS; the head waits (and blocks those behind it) until memory and a batch slot free up,
    // so a large request is never starved by a stream of small ones. Cached memory gives way to it. A
    // deferred one keeps its place while those behind it go ahead. A sequence goes to the home with the
    // most room (the lowest index among equals); where none has room, to the one that reclaiming its cache
    // can make room in, if any.
    for (auto it = waiting_.begin(); it != waiting_.end() && int(running_.size()) < cfg_.max_running;) {
        Seq s = *it;
        if (hooks.defer && hooks.defer(s.d.id)) {
            ++it;
            continue;
        }
        int home = 0;
        for (int h = 1; h < int(bins_.size()); ++h)
            if (unused(h) > unused(home)) home = h;
        if (s.d.bytes > unused(home) && hooks.reclaim) {
            int best = -1;  // the home whose room and cache together fit it best
            for (int h = 0; h < int(bins_.size()); ++h)
                if (bin(h).cached > 0 && s.d.bytes <= unused(h) + bin(h).cached &&
                    (best < 0 || unused(h) + bin(h).cached > unused(best) + bin(best).cached))
                    best = h;
            if (best >= 0) {
                home = best;
                release_cached(hooks.reclaim(s.d.bytes - unused(home), home), home);
            }
        }
        if (s.d.bytes > unused(home)) break;
        s.home = home;
        bin(home).in_use += s.d.bytes;
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

void Scheduler::fed_more(uint64_t id, int64_t n) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const Seq& s) { return s.d.id == id; });
    if (it == running_.end()) return;  // removed while the step ran
    DI_CHECK(n >= 0 && it->decoding(), "sequence {}: {} more tokens fed while prefilling", id, n);
    it->n_fed += n;
}

bool Scheduler::remove(uint64_t id) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const Seq& s) { return s.d.id == id; });
    if (it != running_.end()) {
        bin(it->home).in_use -= it->d.bytes;
        running_.erase(it);
        return true;
    }
    auto w = std::find_if(waiting_.begin(), waiting_.end(), [&](const Seq& s) { return s.d.id == id; });
    if (w == waiting_.end()) return false;
    waiting_.erase(w);
    return true;
}

}  // namespace di::runtime
