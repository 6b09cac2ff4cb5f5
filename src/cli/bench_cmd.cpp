// deepinfer bench: prefill and decode throughput of a model (or the demo model) on a backend, and the
// per-sequence state size at several lengths. Kernel-level benchmarks live in bench/.
#include <fmt/format.h>

#include "cli/command.h"
#include "cli/generate_common.h"
#include "model/seq_state.h"
#include "runtime/throughput.h"

namespace di::cli {
namespace {

struct Options : GenOptions {
    int64_t prompt = 256, decode = 16, batch = 1;
};

int run_bench(const Options& o) {
    if (o.prompt < 1 || o.decode < 0 || o.batch < 1) return fail("bench: --prompt and --batch must be >= 1, --decode >= 0");
    auto lm = load_for_generation(o);
    if (!lm) return fail(lm.error().message);
    const auto& cfg = lm->model->config();
    const auto& ws = lm->model->weights().stats;
    const runtime::Throughput t = runtime::measure_throughput(*lm->model, o.prompt, o.decode, o.batch);
    fmt::print("model: {} layers, hidden {}, {:.1f} M params ({:.1f} M active), {:.1f} MiB weights\n", cfg.n_layers,
               cfg.hidden_dim, double(ws.params) / 1e6, double(ws.active_params) / 1e6, double(ws.bytes) / 1048576.0);
    fmt::print("backend {} batch {}: prefill {} tokens in {:.3f} s = {:.1f} tokens/s; decode {} steps in {:.3f} s = "
               "{:.2f} tokens/s, {:.1f} ms/step\n",
               o.backend, o.batch, o.batch * o.prompt, t.prefill_seconds, t.prefill_tokens_per_s(), o.decode,
               t.decode_seconds, t.decode_tokens_per_s(), t.ms_per_step());
    const model::StateSize ss = model::state_size(cfg);
    fmt::print("state per sequence: {:.1f} KiB fixed + {:.1f} B/token", double(ss.fixed_bytes) / 1024, ss.bytes_per_token);
    for (int64_t n : {4096, 65536, 1048576}) fmt::print("; {} tokens {:.2f} MiB", n, double(ss.bytes_for(n)) / 1048576.0);
    fmt::print("\n");
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto o = std::make_shared<Options>();
    add_model_options(app, *o);
    app.add_option("--prompt", o->prompt, "prompt tokens per sequence (prefilled in one step)");
    app.add_option("--decode", o->decode, "greedy decode steps");
    app.add_option("--batch", o->batch, "sequences per step");
    return [o] { return run_bench(*o); };
}

}  // namespace

DI_COMMAND("bench", "Measure prefill and decode throughput (built-in demo model when no --model)", setup);

}  // namespace di::cli
