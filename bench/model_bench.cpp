// End-to-end model benchmark: prefill tokens/s, decode tokens/s and per-token latency, and per-sequence
// state memory as the sequence grows, for a model directory or a built-in random model ("demo", "mid").
//   model_bench [--model DIR | --preset demo|mid|flash] [--backend ref|cpu|cuda] [--prompt N] [--decode N]
//               [--layers L]  (flash: the first L layers of V4-Flash, 4 by default, drawn in memory: no file)
//               [--prefill-chunk C] (the prompt in steps of C tokens: long prompts; 0, the default: one step)
//               [--warmup W]  (W untimed runs of the same prompt first, 1 by default; 0 times the cold step)
//               [--batch B]   (B sequences: B prefills of N tokens in one step, then steps of B decodes)
//               [--context C] (each sequence first holds a synthetic state of C tokens, rounded up to a
//                              multiple of the largest compression rate: decode at a long context without
//                              its prefill; SequenceState::fill_synthetic)
//               [--profile 1] (per-op time, bytes and GB/s of the prefill and of the decode steps; every op
//                              synchronised, so the totals exceed the unprofiled times by the launch gaps)
//               [--profile host] (nothing synchronised: the host's time to issue each op)
//               [--profile shapes] (as 1, linear apart by weight format and shape, attention by kind)
//               [--gpus N]    (N expert-parallel ranks, each sequence on one: GPUs 0 .. N-1 on cuda,
//                              threads on cpu and ref; docs/parallel.md)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "demo/demo_model.h"
#include "demo/presets.h"
#include "ops/compare/profile_backend.h"
#include "perf/throughput.h"
#include "runtime/backend_factory.h"
#include "runtime/model_loader.h"

using namespace di;

int main(int argc, char** argv) {
    std::string dir, preset = "demo", backend_name = "ref";
    int64_t n_prompt = 256, n_decode = 16, batch = 1, n_layers = 4, warmup = 1, context = 0,
            prefill_chunk = 0;
    int expert_ranks = 1;
    std::string profile = "0", precision = "exact", graphs = "on";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--model")
            dir = v;
        else if (k == "--preset")
            preset = v;
        else if (k == "--backend")
            backend_name = v;
        else if (k == "--prompt")
            n_prompt = std::stoll(v);
        else if (k == "--decode")
            n_decode = std::stoll(v);
        else if (k == "--batch")
            batch = std::stoll(v);
        else if (k == "--layers")
            n_layers = std::stoll(v);
        else if (k == "--profile")
            profile = v;
        else if (k == "--precision")
            precision = v;
        else if (k == "--graphs")
            graphs = v;  // on | off (CUDA graph replay of the step's segments)
        else if (k == "--context")
            context = std::stoll(v);
        else if (k == "--prefill-chunk")
            prefill_chunk = std::stoll(v);  // prompt tokens per prefill step (0: the whole prompt in one)
        else if (k == "--gpus" || k == "--expert-ranks")
            expert_ranks = std::stoi(v);  // expert-parallel ranks (docs/parallel.md)
        else if (k == "--warmup")
            warmup = std::stoll(v);  // untimed runs of the same prompt first (0: time the cold first step)
    }
    demo::RandomModel in_memory;
    if (dir.empty() && preset == "flash") {
        if (n_layers < 1 || n_layers > 43)
            return std::fprintf(stderr, "model_bench: --layers %lld: V4-Flash has 1 to 43 layers\n",
                                (long long)n_layers),
                   2;
        auto r = demo::random_model_in_memory(demo::flash_spec(n_layers));
        if (!r) return std::fprintf(stderr, "%s\n", r.error().message.c_str()), 1;
        in_memory = std::move(*r);
        dir = "(V4-Flash, first " + std::to_string(n_layers) + " layers, random weights in memory)";
    } else if (dir.empty()) {
        if (preset == "demo") {
            auto d = demo::ensure_demo_model();
            if (!d) return std::fprintf(stderr, "%s\n", d.error().message.c_str()), 1;
            dir = *d;
        } else {
            if (preset != "mid" && preset != "mid-fullvocab")
                return std::fprintf(stderr,
                                    "model_bench: unknown preset '%s' (demo, mid, mid-fullvocab, flash)\n",
                                    preset.c_str()),
                       2;
            demo::RandomModelSpec spec = demo::mid_spec();
            if (preset == "mid-fullvocab")
                spec.vocab = 129280;  // the tokenizer's vocabulary (peer benchmarks)
            dir = (std::filesystem::temp_directory_path() / ("deepinfer-bench-" + preset)).string();
            if (!std::filesystem::exists(dir + "/model.safetensors"))
                if (auto st = demo::write_random_model(dir, spec); !st)
                    return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
        }
    }
    if (expert_ranks > 1 && profile != "0")
        return std::fprintf(stderr, "model_bench: --profile times one backend; it does not take --gpus\n"), 2;
    auto be = runtime::make_backend(backend_name);
    if (!be) return std::fprintf(stderr, "%s\n", be.error().message.c_str()), 1;
    (*be)->set_graphs(graphs == "on");
    std::unique_ptr<ops::ProfileBackend> prof;
    if (profile != "0") prof = std::make_unique<ops::ProfileBackend>(**be, profile != "host");
    if (prof) prof->set_by_shape(profile == "shapes");
    ops::Backend& run_on = prof ? *prof : **be;
    auto m = in_memory.checkpoint ? runtime::load_model_in_memory(in_memory.config_json, in_memory.checkpoint,
                                                                  run_on, expert_ranks)
                                  : runtime::load_model(dir, run_on, false, expert_ranks);
    in_memory = {};  // the device holds its copies now
    if (!m) return std::fprintf(stderr, "%s\n", m.error().message.c_str()), 1;
    auto& model = **m;
    auto p = runtime::parse_precision(precision);
    if (!p) return std::fprintf(stderr, "%s\n", p.error().message.c_str()), 2;
    model.set_precision(*p);
    const auto& cfg = model.config();
    Result<int64_t> ctx = perf::synthetic_context(cfg, context, n_prompt, n_decode);
    if (!ctx) return std::fprintf(stderr, "model_bench: %s\n", ctx.error().message.c_str()), 2;
    context = *ctx;
    // Untimed runs first, as llama-bench does: the first step of a process pays for first touches (mmapped
    // weights paged in: 48% of a cold demo prefill was its embedding lookups), graph captures and workspace
    // growth, none of which a running server pays again.
    for (int64_t i = 0; i < warmup; ++i)
        perf::measure_throughput(model, n_prompt, std::min<int64_t>(n_decode, 2), batch, {}, context,
                                 prefill_chunk);
    if (prof) prof->reset();
    const perf::Throughput t = perf::measure_throughput(
        model, n_prompt, n_decode, batch,
        [&] {
            if (!prof) return;
            fmt::print(
                "profile of the prefill ({} x {} tokens, {}):\n{}\n", batch, n_prompt,
                prefill_chunk > 0 ? fmt::format("steps of {}", prefill_chunk) : std::string("one step"),
                prof->markdown());
            prof->reset();
        },
        context, prefill_chunk);
    if (prof) fmt::print("profile of {} decode steps (batch {}):\n{}\n", n_decode, batch, prof->markdown());
    const auto& ws = model.weight_stats();
    if (expert_ranks > 1) fmt::print("expert-parallel ranks {} (each sequence on one)\n", expert_ranks);
    fmt::print("model {} ({} layers, hidden {}, {:.1f} M params, {:.1f} M active, {:.1f} MiB weights)\n", dir,
               cfg.n_layers, cfg.hidden_dim, double(ws.params) / 1e6, double(ws.active_params) / 1e6,
               double(ws.bytes) / 1048576.0);
    fmt::print(
        "backend {} precision {} graphs {} batch {} warm-up {} synthetic context {}: prefill {} tokens{} in "
        "{:.3f} s = {:.1f} tokens/s; decode {} steps in {:.3f} s = {:.2f} tokens/s, {:.1f} ms/step\n",
        backend_name, precision, graphs, batch, warmup, context, batch * n_prompt,
        prefill_chunk > 0 ? fmt::format(" (steps of {})", prefill_chunk) : std::string(), t.prefill_seconds,
        t.prefill_tokens_per_s(), n_decode, t.decode_seconds, t.decode_tokens_per_s(), t.ms_per_step());
    fmt::print("activation workspace {:.1f} MiB\n", double(model.workspace_bytes()) / 1048576.0);
    const model::StateSize ss = model.state_size();
    fmt::print("state per sequence (f32): fixed {:.1f} KiB + {:.1f} B/token:", double(ss.fixed_bytes) / 1024,
               ss.bytes_per_token);
    for (int64_t n : {1024, 8192, 65536, 1048576})
        fmt::print("  {}: {:.2f} MiB", n, double(ss.bytes_for(n)) / 1048576.0);
    fmt::print("\n");
    return 0;
}
