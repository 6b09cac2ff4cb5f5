#include "cli/generate_common.h"

#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "demo/demo_model.h"
#include "runtime/backend_factory.h"
#include "runtime/kernels_file.h"
#include "runtime/model_loader.h"

namespace di::cli {

void add_model_options(CLI::App& app, GenOptions& o) {
    app.add_option("-m,--model,model", o.model, "model directory (default: the built-in demo model)");
    app.add_option("--backend", o.backend,
                   "auto (default: cuda where a GPU is present, else cpu) | cpu | cuda | ref");
    app.add_flag("--check-weights", o.check_weights, "scan every weight for NaN/infinity at load");
    app.add_option("--kernels", o.kernels, "kernel allow-list file (written by `deepinfer screen`)");
    add_precision_option(app, o.precision);
    add_graphs_option(app, o.graphs);
    add_sample_candidates_option(app, o.sample_candidates);
    add_expert_ranks_option(app, o.expert_ranks);
}

void add_expert_ranks_option(CLI::App& app, int& ranks) {
    app.add_option("--expert-ranks,--gpus", ranks,
                   "expert-parallel ranks, each holding a block of the routed experts and the attention "
                   "state of its share of the sequences: threads of this process (cpu, ref), or GPUs "
                   "0 .. N-1 through NCCL (cuda); the same output as one rank, bit for bit where the "
                   "kernels are batch-invariant (always on cpu and ref)")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
}

void add_sample_candidates_option(CLI::App& app, int& candidates) {
    app.add_option(
           "--sample-candidates", candidates,
           "sampled tokens are drawn from each logits row's N best ids computed where the logits are "
           "(the same tokens; a draw that needs more takes the whole row): -1, the default, 256 where "
           "the backend computes them on its device, else whole rows; 0 always whole rows")
        ->check(CLI::Range(-1, kMaxSampleCandidates))
        ->capture_default_str();
}

void add_speculative_option(CLI::App& app, std::string& speculative) {
    app.add_option(
           "--speculative", speculative,
           "off | mtp: the checkpoint's MTP block guesses the token after next, and each decode step "
           "checks the guess beside the next token, yielding two tokens where it is kept (greedy: the "
           "same tokens as off, but for near ties in cuda's native precision; sampled: the same "
           "distribution; docs/speculative.md)")
        ->check(CLI::IsMember({"off", "mtp"}))
        ->capture_default_str();
}

void add_graphs_option(CLI::App& app, bool& graphs) {
    app.add_flag(
        "--graphs,!--no-graphs", graphs,
        "replay CUDA graphs of the step's segments (the default on cuda); --no-graphs launches every "
        "kernel one by one");
}

void add_precision_option(CLI::App& app, std::string& precision) {
    app.add_option("--precision", precision,
                   "exact (f32 activations) | native (FP8 GEMM inputs per 128-column block and bf16 residual "
                   "streams, as DeepSeek's own inference code; FP8 tensor cores on cuda)")
        ->check(CLI::IsMember({"exact", "native"}))
        ->capture_default_str();
}

void add_sampling_options(CLI::App& app, GenOptions& o) {
    auto& s = o.sampling;
    app.add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate at most")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--min-new-tokens", o.min_new_tokens, "suppress EOS until this many tokens exist")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--temperature", s.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
    app.add_option("--top-k", s.top_k, "keep the k most likely tokens (0 = off)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--top-p", s.top_p, "nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
    app.add_option("--min-p", s.min_p, "drop tokens below min_p * p(best)")->check(CLI::Range(0.0, 1.0));
    app.add_option("--repetition-penalty", s.repetition_penalty, "transformers' repetition penalty")
        ->check(CLI::Range(0.01, 100.0));
    s.seed = std::random_device{}();  // two runs at temperature > 0 differ unless --seed fixes them
    app.add_option("--seed", s.seed, "sampling seed (default: random)");
    app.add_option("--stop", o.stop, "stop when this text appears (repeatable)");
    app.add_flag("--stats", o.stats,
                 "after each answer, print the prompt's tokens (those restored from the prefix cache), the "
                 "prefill and decode rates on stderr");
    auto* json = app.add_flag("--json", o.json, "answer with a JSON object (constrained decoding)");
    app.add_option("--json-schema", o.json_schema_file,
                   "answer with JSON that satisfies the schema in this file")
        ->excludes(json);
}

namespace {

Result<OutputConstraint> constraint_of(const GenOptions& o, const Tokenizer* tok) {
    OutputConstraint c;
    if (o.json) c.kind = OutputConstraint::Kind::kJsonObject;
    if (!o.json_schema_file.empty()) {
        std::ifstream f(o.json_schema_file);
        if (!f)
            return make_error(ErrorCode::kNotFound, "--json-schema {}: cannot read the file",
                              o.json_schema_file);
        c.kind = OutputConstraint::Kind::kJsonSchema;
        c.json_schema.assign(std::istreambuf_iterator<char>(f), {});
        if (!nlohmann::json::accept(c.json_schema))
            return make_error(ErrorCode::kInvalidArgument, "--json-schema {}: not valid JSON",
                              o.json_schema_file);
    }
    if (c.kind != OutputConstraint::Kind::kNone && o.reasoning_first && tok)
        if (auto end = tok->token_id("</think>")) c.after_token = *end;
    return c;
}

}  // namespace

Result<std::unique_ptr<ops::Backend>> make_backend_for(const GenOptions& o) {
    DI_TRY(std::unique_ptr<ops::Backend> be, runtime::make_backend(o.backend));
    be->set_graphs(o.graphs);
    if (!o.kernels.empty()) DI_TRY_STATUS(runtime::apply_kernels_file(o.kernels, *be));
    return be;
}

Result<LoadedModel> load_for_generation(const GenOptions& o, bool profile) {
    LoadedModel lm;
    std::string dir = o.model;
    if (dir.empty()) {
        std::fprintf(stderr, "%s\n", demo::kDemoNotice);
        DI_TRY(dir, demo::ensure_demo_model());
    }
    DI_TRY(lm.backend, make_backend_for(o));
    DI_TRY(const model::Precision precision, runtime::parse_precision(o.precision));
    if (profile) lm.profile = std::make_unique<ops::ProfileBackend>(*lm.backend, /*synchronize=*/true);
    ops::Backend& run_on = lm.profile ? *lm.profile : *lm.backend;
    DI_TRY(lm.model, runtime::load_model(dir, run_on, o.check_weights, o.expert_ranks));
    lm.model->set_precision(precision);
    if (std::FILE* f = std::fopen((dir + "/tokenizer.json").c_str(), "r")) {
        std::fclose(f);
        DI_TRY(Tokenizer t, Tokenizer::load(dir));
        lm.tokenizer = std::move(t);
    }
    return lm;
}

std::atomic<bool>& interrupt_flag() {
    static std::atomic<bool> flag{false};
    return flag;
}

extern "C" void di_on_sigint(int) { interrupt_flag().store(true); }

void install_interrupt_handler() { set_interrupt_restarts(true); }

void set_interrupt_restarts(bool restart) {
    struct sigaction sa = {};
    sa.sa_handler = di_on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigaction(SIGINT, &sa, nullptr);
}

Result<std::unique_ptr<Engine>> start_engine(const GenOptions& o) {
    EngineOptions e;
    e.model_dir = o.model;
    if (e.model_dir.empty()) {
        std::fprintf(stderr, "%s\n", demo::kDemoNotice);
        DI_TRY(e.model_dir, demo::ensure_demo_model());
    }
    e.backend = o.backend;
    e.kernels_file = o.kernels;
    e.precision = o.precision;
    e.graphs = o.graphs;
    e.sample_candidates = o.sample_candidates;
    e.check_weights = o.check_weights;
    e.expert_ranks = o.expert_ranks;
    e.speculative = o.speculative;
    e.prefix_cache = o.prefix_cache;  // `run` sends one request: nothing to reuse
    e.prefix_cache_max_bytes = kChatPrefixCacheBytes;
    e.max_running = 1;
    e.state_memory_bytes = std::numeric_limits<int64_t>::max();  // one request: its own state is the limit
    e.default_timeout = std::chrono::hours(24 * 365);
    return Engine::create(e);
}

Result<StreamedGeneration> stream_generation(Engine& engine, const std::vector<int32_t>& prompt,
                                             const GenOptions& o) {
    StreamedGeneration out;
    if (o.max_new_tokens == 0) return out;  // nothing to generate (the engine takes max_tokens >= 1)
    const Tokenizer* tok = engine.tokenizer();
    if (!o.stop.empty() && !tok)
        return make_error(ErrorCode::kInvalidArgument,
                          "--stop needs a tokenizer.json in the model directory");
    Request r;
    r.prompt = prompt;
    const runtime::SamplingParams& p = o.sampling;
    r.sampling.temperature = p.temperature;
    r.sampling.top_k = p.top_k;
    r.sampling.top_p = p.top_p;
    r.sampling.min_p = p.min_p;
    r.sampling.repetition_penalty = p.repetition_penalty;
    r.sampling.seed = p.seed;
    r.sampling.logprobs = o.output == "jsonl";
    r.stop.max_tokens = o.max_new_tokens;
    r.stop.min_tokens = std::min(o.min_new_tokens, o.max_new_tokens);
    r.stop.stop = o.stop;
    DI_TRY(r.constraint, constraint_of(o, tok));
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const EngineStats before = engine.stats();
    DI_TRY(std::shared_ptr<RequestStream> stream, engine.submit(std::move(r)));
    std::optional<StreamDecoder> dec;  // jsonl: each token's own text
    if (tok && o.output == "jsonl") dec.emplace(*tok, /*skip_special=*/true);
    auto t_first = t0;
    bool cancelled = false;
    for (;;) {
        if (!cancelled && interrupt_flag().load()) {
            stream->cancel();
            cancelled = true;
        }
        std::optional<RequestEvent> e = stream->next(std::chrono::milliseconds(50));
        if (!e) continue;
        if (out.tokens.empty() && !e->tokens.empty()) t_first = clock::now();
        for (const GeneratedToken& t : e->tokens) {
            out.tokens.push_back(t.id);
            if (o.output != "jsonl") continue;
            nlohmann::json j = {{"id", t.id}, {"logprob", t.logprob}};
            if (dec) {
                auto piece = dec->push(t.id);
                j["text"] = piece ? *piece : std::string();
            }
            fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        }
        out.text += e->text;
        out.cached_tokens = e->cached_tokens;
        if (o.output == "text" && !e->text.empty()) {
            std::fwrite(e->text.data(), 1, e->text.size(), stdout);
            std::fflush(stdout);
        }
        if (!e->finished) continue;
        out.finish = e->reason;
        if (e->reason == FinishReason::kError || e->reason == FinishReason::kTimeout)
            return make_error(ErrorCode::kFormat, "{}", e->error);
        break;
    }
    const auto t_end = clock::now();
    const EngineStats after = engine.stats();
    out.drafts = after.draft_tokens - before.draft_tokens;
    out.drafts_kept = after.draft_tokens_accepted - before.draft_tokens_accepted;
    out.prompt_tokens = int64_t(prompt.size());
    out.prefill_s = std::chrono::duration<double>(t_first - t0).count();
    out.decode_s = std::chrono::duration<double>(t_end - t_first).count();
    if (o.output == "ids") fmt::print("{}\n", nlohmann::json(out.tokens).dump());
    if (o.output == "jsonl")
        fmt::print("{}\n", nlohmann::json{{"finish_reason", finish_reason_name(out.finish)},
                                          {"prompt_tokens", prompt.size()},
                                          {"generated_tokens", out.tokens.size()},
                                          {"prefill_seconds", out.prefill_s},
                                          {"decode_seconds", out.decode_s}}
                               .dump());
    return out;
}

std::string stats_line(const StreamedGeneration& g) {
    const double prefilled = double(g.prompt_tokens - g.cached_tokens);
    const int64_t after_first = std::max<int64_t>(int64_t(g.tokens.size()) - 1, 0);
    std::string line = fmt::format(
        "prompt {} tokens ({} from the prefix cache), prefill {:.1f} tok/s, {} generated at {:.1f} tok/s",
        g.prompt_tokens, g.cached_tokens, g.prefill_s > 0 ? prefilled / g.prefill_s : 0.0, g.tokens.size(),
        g.decode_s > 0 ? double(after_first) / g.decode_s : 0.0);
    if (g.drafts > 0)
        line += fmt::format(", {} of {} drafts kept ({:.0f}%)", g.drafts_kept, g.drafts,
                            100.0 * double(g.drafts_kept) / double(g.drafts));
    return line;
}

}  // namespace di::cli
