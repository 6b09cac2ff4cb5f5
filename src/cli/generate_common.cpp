#include "cli/generate_common.h"

#include <signal.h>

#include <csignal>
#include <random>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/backend_factory.h"
#include "runtime/demo_model.h"
#include "runtime/kernels_file.h"
#include "runtime/model_loader.h"

namespace di::cli {

void add_model_options(CLI::App& app, GenOptions& o) {
    app.add_option("-m,--model,model", o.model, "model directory (default: the built-in demo model)");
    app.add_option("--backend", o.backend, "auto (default: cuda where a GPU is present, else cpu) | cpu | cuda | ref");
    app.add_flag("--check-weights", o.check_weights, "scan every weight for NaN/infinity at load");
    app.add_option("--kernels", o.kernels, "kernel allow-list file (written by `deepinfer screen`)");
    add_precision_option(app, o.precision);
    add_graphs_option(app, o.graphs);
}

void add_graphs_option(CLI::App& app, bool& graphs) {
    app.add_flag("--graphs", graphs,
                 "replay CUDA graphs of the step's segments instead of launching every kernel (experimental)");
}

void add_precision_option(CLI::App& app, std::string& precision) {
    app.add_option("--precision", precision,
                   "exact (f32 activations) | native (FP8 GEMM inputs per 128-column block, as DeepSeek's own "
                   "inference code; FP8 tensor cores on cuda)")
        ->check(CLI::IsMember({"exact", "native"}))
        ->capture_default_str();
}

void add_sampling_options(CLI::App& app, GenOptions& o) {
    auto& s = o.sampling;
    app.add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate at most")->check(CLI::NonNegativeNumber);
    app.add_option("--min-new-tokens", o.min_new_tokens, "suppress EOS until this many tokens exist")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--temperature", s.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
    app.add_option("--top-k", s.top_k, "keep the k most likely tokens (0 = off)")->check(CLI::NonNegativeNumber);
    app.add_option("--top-p", s.top_p, "nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
    app.add_option("--min-p", s.min_p, "drop tokens below min_p * p(best)")->check(CLI::Range(0.0, 1.0));
    app.add_option("--repetition-penalty", s.repetition_penalty, "transformers' repetition penalty")
        ->check(CLI::Range(0.01, 100.0));
    s.seed = std::random_device{}();  // two runs at temperature > 0 differ unless --seed fixes them
    app.add_option("--seed", s.seed, "sampling seed (default: random)");
    app.add_option("--stop", o.stop, "stop when this text appears (repeatable)");
}

Result<LoadedModel> load_for_generation(const GenOptions& o) {
    LoadedModel lm;
    std::string dir = o.model;
    if (dir.empty()) {
        std::fprintf(stderr, "%s\n", runtime::kDemoNotice);
        DI_TRY(dir, runtime::ensure_demo_model());
    }
    DI_TRY(lm.backend, runtime::make_backend(o.backend));
    lm.backend->set_graphs(o.graphs);
    if (!o.kernels.empty()) DI_TRY_STATUS(runtime::apply_kernels_file(o.kernels, *lm.backend));
    DI_TRY(const model::Precision precision, runtime::parse_precision(o.precision));
    DI_TRY(lm.model, runtime::load_model(dir, *lm.backend, o.check_weights));
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

namespace {

// Length of the longest suffix of `text` that is a proper prefix of some stop string (held back).
size_t held_back(const std::string& text, const std::vector<std::string>& stops) {
    size_t hold = 0;
    for (const auto& s : stops)
        for (size_t k = std::min(s.size() - 1, text.size()); k > hold; --k)
            if (text.compare(text.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
    return hold;
}

}  // namespace

Result<StreamedGeneration> stream_generation(LoadedModel& lm, const std::vector<int32_t>& prompt, const GenOptions& o) {
    const auto& cfg = lm.model->config();
    runtime::GenerateOptions g;
    g.max_new_tokens = o.max_new_tokens;
    g.min_new_tokens = o.min_new_tokens;
    g.sampling = o.sampling;
    for (int64_t e : cfg.eos_token_ids) g.eos_ids.push_back(int32_t(e));
    g.cancel = &interrupt_flag();
    if (!o.stop.empty() && !lm.tokenizer)
        return make_error(ErrorCode::kInvalidArgument, "--stop needs a tokenizer.json in the model directory");

    StreamedGeneration out;
    std::optional<StreamDecoder> dec;
    if (lm.tokenizer) dec.emplace(*lm.tokenizer, /*skip_special=*/true);
    size_t printed = 0;  // bytes of out.text already written
    bool stopped = false;
    auto on_token = [&](const runtime::SampledToken& t) {
        std::string piece;
        if (dec) {
            auto p = dec->push(t.id);
            if (p) piece = *p;
        }
        out.text += piece;
        for (const auto& s : o.stop)
            if (size_t at = out.text.find(s); at != std::string::npos) {
                out.text.resize(at);
                stopped = true;
            }
        if (o.output == "jsonl") {
            nlohmann::json j = {{"id", t.id}, {"logprob", t.logprob}};
            if (dec) j["text"] = piece;
            fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        } else if (o.output == "text") {
            const size_t safe = stopped ? out.text.size() : out.text.size() - held_back(out.text, o.stop);
            if (safe > printed) {
                std::fwrite(out.text.data() + printed, 1, safe - printed, stdout);
                std::fflush(stdout);
                printed = safe;
            }
        }
        return !stopped;
    };
    DI_TRY(runtime::GenerateResult r, runtime::generate(*lm.model, prompt, g, on_token));
    out.tokens = std::move(r.tokens);
    out.finish = r.finish;
    if (o.output == "text" && printed < out.text.size()) std::fwrite(out.text.data() + printed, 1, out.text.size() - printed, stdout);
    if (o.output == "ids") fmt::print("{}\n", nlohmann::json(out.tokens).dump());
    if (o.output == "jsonl")
        fmt::print("{}\n", nlohmann::json{{"finish_reason", runtime::finish_reason_name(out.finish)},
                                          {"prompt_tokens", prompt.size()},
                                          {"generated_tokens", out.tokens.size()},
                                          {"prefill_seconds", r.prefill_seconds},
                                          {"decode_seconds", r.decode_seconds}}
                               .dump());
    return out;
}

}  // namespace di::cli
