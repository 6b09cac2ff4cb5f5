// End-to-end model benchmark: prefill tokens/s, decode tokens/s and per-token latency, and per-sequence
// state memory as the sequence grows, for a model directory or a built-in random model ("demo", "mid").
//   model_bench [--model DIR | --preset demo|mid] [--backend ref|cpu|cuda] [--prompt N] [--decode N]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "model/seq_state.h"
#include "runtime/backend_factory.h"
#include "runtime/demo_model.h"
#include "runtime/model_loader.h"

using namespace di;

namespace {

runtime::RandomModelSpec mid_spec() {  // real V4 head and index shapes, reduced width, depth and vocabulary
    runtime::RandomModelSpec s;
    s.vocab = 32768;
    s.hidden = 1024;
    s.heads = 8;
    s.head_dim = 512;
    s.q_lora = 512;
    s.o_groups = 4;
    s.o_lora = 512;
    s.index_heads = 16;
    s.index_dim = 128;
    s.index_topk = 512;
    s.experts = 32;
    s.active = 4;
    s.moe = 512;
    s.compress_ratios = {0, 4, 128, 4, 128, 4, 128, 4};
    return s;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
    std::string dir, preset = "demo", backend_name = "ref";
    int64_t n_prompt = 256, n_decode = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--model") dir = v;
        else if (k == "--preset") preset = v;
        else if (k == "--backend") backend_name = v;
        else if (k == "--prompt") n_prompt = std::stoll(v);
        else if (k == "--decode") n_decode = std::stoll(v);
    }
    if (dir.empty()) {
        if (preset == "demo") {
            auto d = runtime::ensure_demo_model();
            if (!d) return std::fprintf(stderr, "%s\n", d.error().message.c_str()), 1;
            dir = *d;
        } else {
            dir = (std::filesystem::temp_directory_path() / ("deepinfer-bench-" + preset)).string();
            if (!std::filesystem::exists(dir + "/model.safetensors"))
                if (auto st = runtime::write_random_model(dir, mid_spec()); !st)
                    return std::fprintf(stderr, "%s\n", st.error().message.c_str()), 1;
        }
    }
    auto be = runtime::make_backend(backend_name);
    if (!be) return std::fprintf(stderr, "%s\n", be.error().message.c_str()), 1;
    auto m = runtime::load_model(dir, **be);
    if (!m) return std::fprintf(stderr, "%s\n", m.error().message.c_str()), 1;
    auto& model = **m;
    const auto& cfg = model.config();
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (int64_t i = 0; i < n_prompt; ++i) prompt[size_t(i)] = int32_t((i * 7919 + 13) % cfg.vocab_size);

    model::SeqState st(cfg, model.backend(), n_prompt + n_decode);
    auto t0 = std::chrono::steady_clock::now();
    model::SeqChunk c{&st, prompt, false};
    std::vector<float> logits = model.forward(std::span<const model::SeqChunk>(&c, 1));
    const double prefill = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n_decode; ++i) {
        int32_t next = 0;
        for (int64_t v = 1; v < cfg.vocab_size; ++v)
            if (logits[size_t(v)] > logits[size_t(next)]) next = int32_t(v);
        model::SeqChunk d{&st, std::span<const int32_t>(&next, 1), false};
        logits = model.forward(std::span<const model::SeqChunk>(&d, 1));
    }
    const double decode = seconds_since(t0);
    const auto& ws = model.weights().stats;
    fmt::print("model {} ({} layers, hidden {}, {:.1f} M params, {:.1f} M active, {:.1f} MiB weights)\n", dir,
               cfg.n_layers, cfg.hidden_dim, double(ws.params) / 1e6, double(ws.active_params) / 1e6,
               double(ws.bytes) / 1048576.0);
    fmt::print("backend {}: prefill {} tokens in {:.3f} s = {:.1f} tokens/s; decode {} tokens in {:.3f} s = {:.2f} "
               "tokens/s, {:.1f} ms/token\n",
               backend_name, n_prompt, prefill, double(n_prompt) / prefill, n_decode, decode,
               double(n_decode) / decode, 1e3 * decode / double(std::max<int64_t>(n_decode, 1)));
    const model::StateSize ss = model::state_size(cfg);
    fmt::print("state per sequence (f32): fixed {:.1f} KiB + {:.1f} B/token:", double(ss.fixed_bytes) / 1024,
               ss.bytes_per_token);
    for (int64_t n : {1024, 8192, 65536, 1048576}) fmt::print("  {}: {:.2f} MiB", n, double(ss.bytes_for(n)) / 1048576.0);
    fmt::print("\n");
    return 0;
}
