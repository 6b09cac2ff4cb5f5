// Continuous-batching policy, without tensors: which sequences join the running batch (FCFS, by exact
// state-memory accounting) and which tokens each runs in the next step (every decode, then prefill chunks
// under a per-step token budget). The engine (mechanism) executes a StepPlan and reports back.
//
// Prefill chunk boundaries are multiples of `prefill_chunk` counted from the start of each prompt, whatever
// else is running: a sequence's arithmetic is then a function of that sequence alone (batch invariance even
// where chunked and one-shot prefill round differently).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "core/error.h"
#include "deepinfer/defaults.h"

namespace di::runtime {

struct SchedulerConfig {
    int64_t memory_budget_bytes = 0;       // state memory shared by all running sequences
    int max_running = kDefaultMaxRunning;  // sequences in the batch at once
    int64_t step_token_budget =
        kDefaultStepTokenBudget;                   // tokens per step (a decode counts 1); one chunk fits
    int64_t prefill_chunk = kDefaultPrefillChunk;  // prefill chunk length (boundaries at its multiples)
    size_t max_waiting = kDefaultMaxWaiting;       // bounded queue; add() answers kCapacity beyond it
};

struct SeqDemand {
    uint64_t id = 0;
    int64_t n_prompt = 0;  // tokens to prefill (>= 1)
    int64_t bytes = 0;     // state memory the sequence holds from admission to finish
};

struct ScheduledChunk {
    uint64_t id = 0;
    int64_t start = 0;     // position of the first fed token in the sequence
    int64_t n_tokens = 0;  // prefill: chunk length; decode: 1
    bool decode = false;
    bool samples = false;  // the step's last logits row of this chunk is sampled (decode or final chunk)
};

struct StepPlan {
    std::vector<uint64_t> admitted;      // joined the batch this step (allocate their state first)
    std::vector<ScheduledChunk> chunks;  // in batch order
    int64_t n_tokens() const;
    bool empty() const { return chunks.empty(); }
};

// What the engine adds to admission: memory it can give back (a prefix cache's entries) and prompt tokens a
// newly admitted sequence already has in its state (restored from that cache).
struct AdmissionHooks {
    // Frees at least `need` bytes of cached memory if it can; returns the bytes freed (release_cached is
    // then called by the scheduler).
    std::function<int64_t(int64_t need)> reclaim;
    // Tokens of sequence `id`'s prompt its state will hold before its first chunk runs: a multiple of the
    // prefill chunk, less than the prompt.
    std::function<int64_t(uint64_t id)> prefilled;
    // Whether waiting sequence `id` should wait a little longer (a running one is about to have a longer
    // part of its prompt cached); it keeps its place, and those behind it may be admitted first.
    std::function<bool(uint64_t id)> defer;
};

class Scheduler {
  public:
    explicit Scheduler(const SchedulerConfig& cfg);

    // Queues a sequence. kOutOfRange when it could never fit the memory budget, kCapacity when the waiting
    // queue is full.
    Status add(const SeqDemand& d);
    // Decides the next step. Admits waiting sequences first (FCFS, stops at the first that does not fit even
    // after hooks.reclaim).
    StepPlan plan(const AdmissionHooks& hooks = {});
    // Memory outside the sequences' reservations (cached states): reserve_cached succeeds only within what
    // no sequence holds, and admission takes it back through AdmissionHooks::reclaim.
    bool reserve_cached(int64_t bytes);
    void release_cached(int64_t bytes);
    // Records that `plan` ran: every chunk's tokens are now in its sequence's state.
    void complete(const StepPlan& plan);
    // Removes a sequence (finished, cancelled, failed), waiting or running, and frees its memory.
    // Returns false when it is unknown.
    bool remove(uint64_t id);

    int n_running() const { return int(running_.size()); }
    int n_waiting() const { return int(waiting_.size()); }
    int64_t bytes_in_use() const { return bytes_in_use_; }
    int64_t bytes_cached() const { return bytes_cached_; }
    const SchedulerConfig& config() const { return cfg_; }
    bool idle() const { return running_.empty() && waiting_.empty(); }

  private:
    struct Seq {
        SeqDemand d;
        int64_t n_fed = 0;  // tokens in the sequence's state
        bool decoding() const { return n_fed >= d.n_prompt; }
    };
    SchedulerConfig cfg_;
    std::deque<Seq> waiting_;
    std::vector<Seq> running_;  // admission order
    int64_t bytes_in_use_ = 0;
    int64_t bytes_cached_ = 0;
};

}  // namespace di::runtime
