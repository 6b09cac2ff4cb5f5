// deepinfer engine: one loop thread owns the model and runs every request in a continuously changing batch
// (requests join and leave at every step, prompts are prefilled in chunks under a per-step token budget,
// admission is by exact state-memory accounting). submit() is thread-safe and never blocks on the model.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "deepinfer/defaults.h"
#include "deepinfer/request.h"
#include "deepinfer/tokenizer.h"

namespace di {

inline constexpr int kMaxSampleCandidates = 1024;  // the most a backend's top_candidates takes a row

struct EngineOptions {
    std::string model_dir;        // config.json + safetensors
    std::string backend = "ref";  // see runtime::backend_names()
    std::string tokenizer_path;   // "": model_dir; a model without tokenizer.json runs on ids only
    int64_t state_memory_bytes = int64_t(2) << 30;  // sequence state shared by all running requests
    int max_running = kDefaultMaxRunning;           // requests in the batch at once
    // tokens per step (each decode counts 1) and prompt tokens per prefill chunk; 0: the backend's defaults
    // (kDefaultStepTokenBudget / kDefaultPrefillChunk, on cuda the *Cuda ones)
    int64_t step_token_budget = 0;
    int64_t prefill_chunk = 0;
    size_t max_waiting = kDefaultMaxWaiting;  // queued for admission; more are refused (kCapacity)
    int64_t max_context = 0;  // prompt + max_tokens limit; 0: the model's max_position_embeddings
    std::chrono::milliseconds default_timeout{600000};
    bool check_weights = false;       // scan every float weight for NaN/infinity at load
    std::string kernels_file;         // kernel allow-list (`deepinfer screen --out`); "": built-in
    std::string precision = "exact";  // exact (f32 activations) | native (fp8 GEMM inputs, as DeepSeek)
    bool graphs = true;               // CUDA graph replay of the step's segments (cuda; replay is
                                      // bit-identical to launching every kernel: tests/gpu/cuda_graphs_test)
    int expert_ranks = 1;             // expert-parallel ranks, threads of this process (host backends so far;
                                      // docs/parallel.md): the same tokens as one rank, bit for bit
    // Sampling steps draw from each logits row's best ids, computed where the logits are (a few kilobytes a
    // row cross to the host instead of the vocabulary; the same tokens: runtime/sampler.h): how many a row.
    // -1: 256 where the backend computes them on its device (ops::Backend::candidates_on_device), else none;
    // 0: none (every sampled row crosses whole); N > 0: N on any backend (at most kMaxSampleCandidates).
    int sample_candidates = -1;
    // Keep prompt states at prefill chunk boundaries in the state memory no request reserves, and start
    // requests whose prompts begin with one from it (runtime/prefix_cache.h: outputs are bit-identical
    // either way; admission evicts them when it needs the room).
    bool prefix_cache = true;
    int64_t prefix_cache_max_bytes = 0;  // > 0: the most it holds (where the state memory is unbounded)
    // Speculative decoding (docs/speculative.md): "mtp" loads the checkpoint's MTP block, which guesses each
    // decoding sequence's token after next; a step verifies the guess beside the next token and keeps it
    // where the model picks it too (greedy: the same tokens as without; sampled: the same distribution), so
    // a step yields one or two. "off": none.
    std::string speculative = "off";
    // Structured output's grammars (response_format, demanded tool calls): each new one compiles first in a
    // helper process, this executable run as `EXE __grammar-worker MEMORY_BYTES` (`deepinfer serve` names
    // its own binary), under a memory limit and a deadline, so that no schema can stall or exhaust the
    // engine: past either the request is refused (400) naming the limit, within them it compiles again here.
    // "": no helper and no limits (for schemas an embedder trusts).
    std::string grammar_worker;
    std::chrono::milliseconds grammar_timeout{20000};
    int64_t grammar_memory_bytes = int64_t(4) << 30;
};

// A kernel variant of the engine's backend, whether the active allow-list lets it run, how often it ran.
struct KernelUse {
    std::string op, variant;
    bool fallback = false, allowed = false;
    int64_t dispatches = 0;
};

struct ModelInfo {
    std::string name;  // model directory's last component
    int64_t vocab_size = 0;
    int64_t max_context = 0;
    std::vector<int32_t> eos_ids;
    int64_t state_fixed_bytes = 0;     // per request
    double state_bytes_per_token = 0;  // per request and token of capacity (prompt + max_tokens)
};

// Cumulative histogram in Prometheus' layout: counts[i] observations <= bounds[i], the last is +Inf.
struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // bounds.size() + 1, per bucket (not cumulative)
    double sum = 0;
    uint64_t count = 0;
    static Histogram latency_seconds();
    void observe(double v);
};

struct EngineStats {
    uint64_t requests_submitted = 0, requests_rejected = 0;
    uint64_t finished_stop = 0, finished_length = 0, finished_cancelled = 0, finished_timeout = 0,
             finished_error = 0;
    uint64_t prompt_tokens = 0, generation_tokens = 0, steps = 0;
    uint64_t greedy_steps = 0;  // steps whose tokens the model picked where the logits are (only ids back)
    // Speculative decoding: drafted tokens the model verified, and those it kept (each a token gained).
    uint64_t draft_tokens = 0, draft_tokens_accepted = 0;
    uint64_t candidate_draws = 0, full_row_draws = 0;  // sampled tokens drawn from candidates / whole rows
    int n_running = 0, n_waiting = 0;
    int64_t state_bytes_allocated = 0;  // held by live sequence states now
    int64_t state_bytes_reserved = 0;   // reserved by admitted requests (>= allocated)
    int64_t state_bytes_budget = 0;
    int64_t prefix_cache_bytes = 0;  // held by the prefix cache's states (within the budget, unreserved)
    uint64_t prefix_cache_entries = 0;
    uint64_t prefix_cache_hits = 0;        // requests started from a cached state
    uint64_t prefix_cache_hit_tokens = 0;  // prompt tokens those requests did not prefill
    uint64_t prefix_cache_evictions = 0;
    Histogram ttft_seconds = Histogram::latency_seconds();  // submit -> first token
    Histogram itl_seconds = Histogram::latency_seconds();   // between consecutive tokens
    Histogram batch_size = {{1, 2, 4, 8, 16, 32, 64, 128}, std::vector<uint64_t>(9, 0), 0, 0};
};

class Engine {
  public:
    static Result<std::unique_ptr<Engine>> create(const EngineOptions& options);
    ~Engine();  // shutdown()
    // Stops the loop: every unfinished request, running or queued, ends with kCancelled ("the engine shut
    // down"), and submit() answers kUnsupported from then on. Idempotent; thread-safe.
    void shutdown();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Validates and queues a request. Errors: kInvalidArgument / kOutOfRange (bad request, prompt over the
    // context limit, a request that could never fit the state memory), kCapacity (queue full), kUnsupported
    // (engine stopping). The stream's last event says how it finished.
    Result<std::shared_ptr<RequestStream>> submit(Request request);

    EngineStats stats() const;
    // Drops every kept prompt state no starting request holds (a benchmark's cold start, or memory back at
    // once); returns {states dropped, bytes freed}.
    std::pair<uint64_t, int64_t> reset_prefix_cache();
    std::vector<KernelUse> kernel_uses() const;
    const ModelInfo& info() const;
    const Tokenizer* tokenizer() const;  // null when the model has none
    const EngineOptions& options() const;
    // Bytes of state a request with this capacity (prompt + max_tokens) reserves.
    int64_t state_bytes_for(int64_t capacity) const;

    struct Impl;

  private:
    explicit Engine(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace di
