// Shared by generate / run / chat: model resolution (embedded demo when no --model), sampling options,
// and streaming one generation to the terminal through the Engine (the server's scheduler, sampler, stop
// handling and finish reasons) with Ctrl-C. bench and screen load the model alone (load_for_generation).
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "deepinfer/tokenizer.h"
#include "model/model.h"
#include "ops/compare/profile_backend.h"
#include "runtime/sampler.h"

namespace di::cli {

struct GenOptions {
    std::string model, backend = "auto", output = "text";
    int64_t max_new_tokens = 256, min_new_tokens = 0;
    runtime::SamplingParams sampling;
    std::vector<std::string> stop;
    bool check_weights = false;
    std::string kernels;  // allow-list file (`deepinfer screen --out`); "": the built-in list
    std::string precision = "exact";
    bool graphs = true;          // CUDA graph replay of the step's segments (cuda; --no-graphs turns it off)
    int sample_candidates = -1;  // EngineOptions::sample_candidates (--sample-candidates)
    bool json = false;           // --json: the answer is a JSON object (constrained decoding)
    std::string json_schema_file;  // --json-schema FILE: the answer satisfies this JSON schema
    bool reasoning_first = false;  // the prompt ends in "<think>": a constraint starts after "</think>"
    int expert_ranks = 1;          // --expert-ranks (docs/parallel.md)
    bool prefix_cache = false;  // chat: each turn starts from the last one's kept state (--no-prefix-cache)
    bool stats = false;         // --stats: a line of counts and rates on stderr after each answer
    std::string speculative = "off";  // EngineOptions::speculative (--speculative)
};
// What chat's prefix cache may hold: the state memory of the CLI's engine is unbounded (one request at a
// time, its own state the limit), so the cache needs its own. V4-Flash's state is ~23 MB + 13.8 KB a token
// (model/seq_state.cpp's layout), so 2 GiB hold the latest state of a ~100K-token conversation.
inline constexpr int64_t kChatPrefixCacheBytes = int64_t(2) << 30;
void add_expert_ranks_option(CLI::App& app, int& ranks);

void add_model_options(CLI::App& app, GenOptions& o);
void add_sampling_options(CLI::App& app, GenOptions& o);
void add_precision_option(CLI::App& app, std::string& precision);
void add_graphs_option(CLI::App& app, bool& graphs);
void add_sample_candidates_option(CLI::App& app, int& candidates);
// --speculative off|mtp (EngineOptions::speculative): the commands that generate through the engine.
void add_speculative_option(CLI::App& app, std::string& speculative);

struct LoadedModel {
    std::unique_ptr<ops::Backend> backend;
    std::unique_ptr<ops::ProfileBackend> profile;  // between the model and backend with `profile`
    std::unique_ptr<model::Model> model;
    std::optional<Tokenizer> tokenizer;  // absent when the model directory has none
};
// Loads --model (or the demo model, printing kDemoNotice to stderr). profile: the model runs through an
// ops::ProfileBackend that times every op (synchronised: bench --profile).
Result<LoadedModel> load_for_generation(const GenOptions& o, bool profile = false);
// The backend of --backend with --no-graphs and --kernels applied.
Result<std::unique_ptr<ops::Backend>> make_backend_for(const GenOptions& o);

// Ctrl-C sets this instead of killing the process while a generation runs.
std::atomic<bool>& interrupt_flag();
void install_interrupt_handler();
// restart = false: a blocking read (the chat prompt) returns at Ctrl-C instead of resuming; true (the
// default, while answering): interrupted writes to the terminal resume.
void set_interrupt_restarts(bool restart);

// An engine for one user at a time: --model (or the demo model, printing kDemoNotice), no state-memory cap
// beyond the request's own, no request timeout.
Result<std::unique_ptr<Engine>> start_engine(const GenOptions& o);

struct StreamedGeneration {
    std::vector<int32_t> tokens;
    std::string text;  // decoded text, up to (excluding) a matched stop string
    FinishReason finish = FinishReason::kLength;
    int64_t prompt_tokens = 0, cached_tokens = 0;  // cached: restored from the prefix cache (chat's turns)
    double prefill_s = 0, decode_s = 0;            // submission to the first token; the first to the last
    uint64_t drafts = 0, drafts_kept = 0;          // speculative decoding: guesses verified / kept
};
// "prompt N tokens (M from the cache), prefill X tok/s, Y generated at Z tok/s" (--stats).
std::string stats_line(const StreamedGeneration& g);
// Generates from `prompt`, printing per o.output ("text": streamed text, "jsonl": one object per token,
// "ids": one JSON array at the end). Ctrl-C (interrupt_flag) cancels it: finish is then kCancelled.
Result<StreamedGeneration> stream_generation(Engine& engine, const std::vector<int32_t>& prompt,
                                             const GenOptions& o);

}  // namespace di::cli
