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
#include <utility>
#include <vector>

#include "core/error.h"
#include "deepinfer/defaults.h"

namespace di::runtime {

struct SchedulerConfig {
    int64_t memory_budget_bytes = 0;  // state memory shared by all running sequences, over all homes
    // Places a sequence's state can live (the ranks of an expert-parallel model, each on its own GPU): the
    // budget splits evenly between them (the remainder to home 0), and each sequence lives in one.
    int homes = 1;
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
    std::vector<uint64_t> admitted;      // joined the batch this step (allocate their state first, each in
                                         // its home: Scheduler::home_of)
    std::vector<ScheduledChunk> chunks;  // in batch order
    int64_t n_tokens() const;
    bool empty() const { return chunks.empty(); }
};

// What the engine adds to admission: memory it can give back (a prefix cache's entries) and prompt tokens a
// newly admitted sequence already has in its state (restored from that cache).
struct AdmissionHooks {
    // Frees at least `need` bytes of cached memory in `home` if it can; returns the bytes freed
    // (release_cached is then called by the scheduler).
    std::function<int64_t(int64_t need, int home)> reclaim;
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

    // Queues a sequence. kOutOfRange when it could never fit the memory budget (one home's share of it),
    // kCapacity when the waiting queue is full.
    Status add(const SeqDemand& d);
    // Decides the next step. Admits waiting sequences first (FCFS, stops at the first that does not fit even
    // after hooks.reclaim).
    StepPlan plan(const AdmissionHooks& hooks = {});
    // Memory outside the sequences' reservations (cached states, each in one home): reserve_cached succeeds
    // only within what no sequence holds in that home, and admission takes it back through
    // AdmissionHooks::reclaim.
    bool reserve_cached(int64_t bytes, int home = 0);
    void release_cached(int64_t bytes, int home = 0);
    // Records that `plan` ran: every chunk's tokens are now in its sequence's state.
    void complete(const StepPlan& plan);
    // A running sequence's state holds n tokens more than its chunks fed (a kept speculative draft).
    void fed_more(uint64_t id, int64_t n);
    // Removes a sequence (finished, cancelled, failed), waiting or running, and frees its memory.
    // Returns false when it is unknown.
    bool remove(uint64_t id);

    int n_running() const { return int(running_.size()); }
    int n_waiting() const { return int(waiting_.size()); }
    // Totals over the homes, and one home's.
    int64_t bytes_in_use() const;
    int64_t bytes_cached() const;
    int64_t bytes_in_use(int home) const { return bin(home).in_use; }
    int64_t bytes_cached(int home) const { return bin(home).cached; }
    // What neither a sequence nor the cache holds in `home`.
    int64_t unused(int home) const;
    // The home of a running sequence (admitted by plan()), -1 for one that is not running.
    int home_of(uint64_t id) const;
    const SchedulerConfig& config() const { return cfg_; }
    bool idle() const { return running_.empty() && waiting_.empty(); }

  private:
    struct Seq {
        SeqDemand d;
        int64_t n_fed = 0;  // tokens in the sequence's state
        int home = -1;      // set at admission
        bool decoding() const { return n_fed >= d.n_prompt; }
    };
    struct Bin {  // one home's memory
        int64_t budget = 0, in_use = 0, cached = 0;
    };
    const Bin& bin(int home) const;
    Bin& bin(int home) { return const_cast<Bin&>(std::as_const(*this).bin(home)); }
    SchedulerConfig cfg_;
    std::deque<Seq> waiting_;
    std::vector<Seq> running_;  // admission order
    std::vector<Bin> bins_;     // one a home
};

}  // namespace di::runtime
