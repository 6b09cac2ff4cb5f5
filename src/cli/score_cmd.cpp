// deepinfer score: runs a token sequence through the model (one prefill, or chunks of --chunk tokens
// through the per-sequence state) and writes the logits of every position as float32 .npy.
#include <fmt/format.h>

#include <cmath>

#include "cli/command.h"
#include "cli/generate_common.h"
#include "io/npy.h"
#include "io/token_list.h"
#include "ops/compare/compare_backend.h"
#include "runtime/backend_factory.h"
#include "runtime/kernels_file.h"
#include "runtime/model_loader.h"
#include "runtime/sampler.h"

namespace di::cli {
namespace {

struct ScoreOptions {
    std::string model, tokens, tokens_file, logits_out, backend = "auto", compare_with;
    int64_t chunk = 0;
    bool check_weights = false;
    std::string kernels, precision = "exact";
    double compare_tol = 1e-3;
};

int run_score(const ScoreOptions& o) {
    auto tokens =
        !o.tokens.empty() ? io::parse_token_list(o.tokens, "--tokens") : io::read_token_file(o.tokens_file);
    if (!tokens) return fail(tokens.error().message);
    auto backend = runtime::make_backend(o.backend);
    if (!backend) return fail(backend.error().message);
    if (!o.kernels.empty())
        if (auto st = runtime::apply_kernels_file(o.kernels, **backend); !st) return fail(st.error().message);
    std::unique_ptr<ops::CompareBackend> compare;
    if (!o.compare_with.empty()) {
        if (o.compare_with != "ref")
            return fail("--compare-with supports 'ref' only, not '" + o.compare_with + "'");
        compare = std::make_unique<ops::CompareBackend>(**backend, o.compare_tol);
    }
    ops::Backend& be = compare ? *compare : **backend;
    auto precision = runtime::parse_precision(o.precision);
    if (!precision) return fail(precision.error().message);
    auto model = runtime::load_model(o.model, be, o.check_weights);
    if (!model) return fail(model.error().message);
    (*model)->set_precision(*precision);
    const auto& cfg = (*model)->config();
    if (auto st = runtime::check_tokens(*tokens, cfg.vocab_size); !st) return fail(st.error().message);
    if (o.chunk < 0) return fail(fmt::format("--chunk {} must be positive", o.chunk));

    const int64_t n = int64_t(tokens->size());
    if (n > cfg.max_position_embeddings)
        return fail(
            fmt::format("{} tokens exceed the model's context of {} tokens", n, cfg.max_position_embeddings));
    const std::unique_ptr<model::SequenceState> state = (*model)->new_state(n);
    std::vector<float> logits;
    logits.reserve(size_t(n * cfg.vocab_size));
    const int64_t step = o.chunk > 0 ? o.chunk : n;
    for (int64_t i = 0; i < n; i += step) {
        const int64_t len = std::min(step, n - i);
        model::SeqChunk c{state.get(), std::span<const int32_t>(tokens->data() + i, size_t(len)), true};
        std::vector<float> part = (*model)->forward(std::span<const model::SeqChunk>(&c, 1));
        logits.insert(logits.end(), part.begin(), part.end());
    }
    if (!o.logits_out.empty()) {
        if (auto st = io::write_npy_f32(o.logits_out, logits.data(), {n, cfg.vocab_size}); !st)
            return fail(st.error().message);
    }
    if (const int64_t bad = runtime::first_non_finite(logits); bad >= 0) {
        int64_t n_bad = 0;
        for (const float l : logits) n_bad += !std::isfinite(l);
        fmt::print(stderr,
                   "warning: {} of {} logits are non-finite, the first ({}) at position {} token id {}: the "
                   "checkpoint's weights or a kernel are broken (try --check-weights)\n",
                   n_bad, logits.size(), logits[size_t(bad)], bad / cfg.vocab_size, bad % cfg.vocab_size);
    }
    const float* last = logits.data() + (n - 1) * cfg.vocab_size;
    int64_t best = 0;
    for (int64_t v = 1; v < cfg.vocab_size; ++v)
        if (last[v] > last[best]) best = v;
    fmt::print("scored {} tokens on backend {}; next-token argmax {} (logit {:.4f})\n", n,
               runtime::resolve_backend(o.backend).name, best, last[best]);
    if (compare) {
        fmt::print("compare with ref: {} ops, worst relative difference {:.3g} ({})\n",
                   compare->ops_compared(), compare->worst_relative(), compare->worst_where());
        if (compare->first_divergence()) {
            fmt::print("first divergent op (tolerance {:.1g}): {}\n", o.compare_tol,
                       compare->first_divergence()->describe());
            return 3;
        }
        fmt::print("all ops agree within {:.1g}\n", o.compare_tol);
    }
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto o = std::make_shared<ScoreOptions>();
    app.add_option("-m,--model,model", o->model, "model directory (config.json + safetensors)")->required();
    auto* t = app.add_option("--tokens", o->tokens, "token ids, comma separated");
    auto* f = app.add_option("--tokens-file", o->tokens_file, "file of whitespace-separated token ids");
    t->excludes(f);
    f->excludes(t);
    app.add_option("--logits-out", o->logits_out, "write float32 logits [n_tokens, vocab_size] to this .npy");
    app.add_option("--backend", o->backend,
                   "auto (default: cuda where a GPU is present, else cpu) | cpu | cuda | ref");
    app.add_option("--compare-with", o->compare_with,
                   "run every op also on this backend (ref) and name the first "
                   "op that diverges; exit code 3 if one does");
    app.add_option("--compare-tol", o->compare_tol, "relative tolerance of --compare-with (default 1e-3)");
    app.add_flag("--check-weights", o->check_weights, "scan every weight for NaN/infinity at load");
    app.add_option("--kernels", o->kernels, "kernel allow-list file (written by `deepinfer screen`)");
    add_precision_option(app, o->precision);
    app.add_option("--chunk", o->chunk,
                   "run the sequence through the state in chunks of N tokens (1 = decode)");
    return [o] {
        if (o->tokens.empty() && o->tokens_file.empty()) return fail("score: give --tokens or --tokens-file");
        return run_score(*o);
    };
}

}  // namespace

DI_COMMAND("score", "Run a token sequence and write the logits of every position", setup);

}  // namespace di::cli
