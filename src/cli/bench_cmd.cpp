// deepinfer bench: prefill and decode throughput of a model (or the demo model) on a backend -- warm-up
// runs, then repetitions reported as mean, sample standard deviation, min and max -- and the per-sequence
// state size at several lengths; text or --json. --profile adds the per-op time of the last run's prefill
// and decode steps (every op synchronised, so that run is slower), --profile-shapes the same with linear and
// attention split by shape and kind. Kernel-level benchmarks live in bench/.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/generate_common.h"
#include "perf/throughput.h"
#include "runtime/backend_factory.h"

namespace di::cli {
namespace {

struct Options : GenOptions {
    int64_t prompt = 256, decode = 16, batch = 1, warmup = 1, repetitions = 3, context = 0;
    bool json = false, profile = false, profile_shapes = false;
};

nlohmann::json to_json(const std::vector<ops::OpProfile>& t) {
    nlohmann::json a = nlohmann::json::array();
    for (const ops::OpProfile& p : t)
        a.push_back({{"op", p.op},
                     {"calls", p.calls},
                     {"seconds", p.seconds},
                     {"bytes", p.bytes},
                     {"flops", p.flops}});
    return a;
}

struct Spread {
    double mean = 0, stddev = 0, min = 0, max = 0;
    std::vector<double> runs;
};

Spread spread_of(std::vector<double> v) {
    Spread s;
    s.runs = v;
    for (double x : v) s.mean += x / double(v.size());
    for (double x : v) s.stddev += (x - s.mean) * (x - s.mean);
    s.stddev = v.size() > 1 ? std::sqrt(s.stddev / double(v.size() - 1)) : 0.0;
    s.min = *std::min_element(v.begin(), v.end());
    s.max = *std::max_element(v.begin(), v.end());
    return s;
}

nlohmann::json to_json(const Spread& s) {
    return {{"mean", s.mean}, {"stddev", s.stddev}, {"min", s.min}, {"max", s.max}, {"runs", s.runs}};
}

std::string text_of(const Spread& s, int precision) {
    return fmt::format("{:.{}f} +- {:.{}f} (min {:.{}f}, max {:.{}f})", s.mean, precision, s.stddev,
                       precision, s.min, precision, s.max, precision);
}

int run_bench(const Options& o) {
    if (o.prompt < 1 || o.decode < 1 || o.batch < 1 || o.warmup < 0 || o.repetitions < 1 || o.context < 0)
        return fail(
            "bench: --prompt, --decode, --batch and --repetitions must be >= 1, --warmup and --context >= 0");
    const runtime::BackendChoice backend = runtime::resolve_backend(o.backend);
    auto lm = load_for_generation(o, o.profile || o.profile_shapes);
    if (!lm) return fail(lm.error().message);
    ops::ProfileBackend* prof = lm->profile.get();
    if (prof) prof->set_by_shape(o.profile_shapes);
    std::vector<ops::OpProfile> prefill_ops, decode_ops;  // of the last run
    const auto& cfg = lm->model->config();
    const auto& ws = lm->model->weight_stats();
    Result<int64_t> ctx = perf::synthetic_context(cfg, o.context, o.prompt, o.decode);
    if (!ctx) return fail("bench: " + ctx.error().message);
    const int64_t context = *ctx;
    for (int64_t i = 0; i < o.warmup; ++i)
        perf::measure_throughput(*lm->model, o.prompt, o.decode, o.batch, {}, context);
    std::vector<double> prefill, decode, ms;
    for (int64_t i = 0; i < o.repetitions; ++i) {
        const bool last = i + 1 == o.repetitions;
        if (prof && last) prof->reset();
        const perf::Throughput t = perf::measure_throughput(
            *lm->model, o.prompt, o.decode, o.batch,
            [&] {
                if (!prof || !last) return;
                prefill_ops = prof->table();
                prof->reset();
            },
            context);
        if (prof && last) decode_ops = prof->table();
        prefill.push_back(t.prefill_tokens_per_s());
        decode.push_back(t.decode_tokens_per_s());
        ms.push_back(t.ms_per_step());
    }
    const Spread p = spread_of(prefill), d = spread_of(decode), m = spread_of(ms);
    const model::StateSize ss = lm->model->state_size();
    const int64_t lengths[] = {4096, 65536, 1048576};
    if (o.json) {
        nlohmann::json state = {{"fixed_bytes", ss.fixed_bytes}, {"bytes_per_token", ss.bytes_per_token}};
        for (int64_t n : lengths) state["bytes_at"][std::to_string(n)] = ss.bytes_for(n);
        const nlohmann::json j = {{"model",
                                   {{"layers", cfg.n_layers},
                                    {"hidden", cfg.hidden_dim},
                                    {"params", ws.params},
                                    {"active_params", ws.active_params},
                                    {"weight_bytes", ws.bytes}}},
                                  {"backend", backend.name},
                                  {"backend_reason", backend.why},
                                  {"batch", o.batch},
                                  {"context", context},
                                  {"prompt_tokens", o.prompt},
                                  {"decode_steps", o.decode},
                                  {"warmup", o.warmup},
                                  {"repetitions", o.repetitions},
                                  {"prefill_tokens_per_s", to_json(p)},
                                  {"decode_tokens_per_s", to_json(d)},
                                  {"ms_per_step", to_json(m)},
                                  {"state", state},
                                  {"activation_bytes", lm->model->workspace_bytes()}};
        nlohmann::json out = j;
        if (prof) out["profile"] = {{"prefill", to_json(prefill_ops)}, {"decode", to_json(decode_ops)}};
        fmt::print("{}\n", out.dump(2));
        return 0;
    }
    fmt::print("model: {} layers, hidden {}, {:.1f} M params ({:.1f} M active), {:.1f} MiB weights\n",
               cfg.n_layers, cfg.hidden_dim, double(ws.params) / 1e6, double(ws.active_params) / 1e6,
               double(ws.bytes) / 1048576.0);
    fmt::print("backend {} ({}), batch {}, {} run(s) after {} warm-up run(s){}:\n", backend.name, backend.why,
               o.batch, o.repetitions, o.warmup,
               context > 0 ? fmt::format(", after a synthetic context of {} tokens", context) : "");
    fmt::print("  prefill {} tokens: {} tokens/s\n", o.batch * o.prompt, text_of(p, 1));
    fmt::print("  decode {} steps: {} tokens/s, {} ms/step\n", o.decode, text_of(d, 2), text_of(m, 2));
    fmt::print("state per sequence: {:.1f} KiB fixed + {:.1f} B/token", double(ss.fixed_bytes) / 1024,
               ss.bytes_per_token);
    for (int64_t n : lengths) fmt::print("; {} tokens {:.2f} MiB", n, double(ss.bytes_for(n)) / 1048576.0);
    fmt::print("\nactivations: {:.1f} MiB (the step arena, as large as the largest step needed)\n",
               double(lm->model->workspace_bytes()) / 1048576.0);
    if (prof) {
        fmt::print("\nper-op time of the last run (every op synchronised), prefill of {} tokens:\n{}",
                   o.batch * o.prompt, ops::ProfileBackend::markdown_of(prefill_ops));
        fmt::print("\n{} decode steps:\n{}", o.decode, ops::ProfileBackend::markdown_of(decode_ops));
    }
    return 0;
}

std::function<int()> setup(CLI::App& app) {
    auto o = std::make_shared<Options>();
    add_model_options(app, *o);
    app.add_option("--prompt", o->prompt, "prompt tokens per sequence (prefilled in one step)")
        ->capture_default_str();
    app.add_option("--decode", o->decode, "greedy decode steps")->capture_default_str();
    app.add_option("--batch", o->batch, "sequences per step")->capture_default_str();
    app.add_option("--context", o->context,
                   "tokens each sequence holds before its prompt: a synthetic state with random contents (no "
                   "prefill of them), rounded up to a multiple of the largest compression rate, so decode is "
                   "measured at a long context")
        ->capture_default_str();
    app.add_option("--warmup", o->warmup, "runs before the measured ones (not reported)")
        ->capture_default_str();
    app.add_option("-r,--repetitions", o->repetitions, "measured runs (mean, spread, min, max)")
        ->capture_default_str();
    app.add_flag("--json", o->json, "print one JSON object instead of text");
    app.add_flag("--profile", o->profile,
                 "per-op time, share, bytes and GB/s, GFLOP and TFLOP/s of the products, of the last run's "
                 "prefill and decode steps (every op synchronised: that run is slower)");
    app.add_flag(
        "--profile-shapes", o->profile_shapes,
        "--profile with the linears apart by weight format and shape and attention by what it attends "
        "to (window, csa picks, hca entries)");
    return [o] { return run_bench(*o); };
}

}  // namespace

DI_COMMAND("bench", "Measure prefill and decode throughput (built-in demo model when no --model)", setup);

}  // namespace di::cli
