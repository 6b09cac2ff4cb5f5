// Per-op CUDA timings on V4-Flash shapes against ceilings measured in the same run (copy bandwidth,
// cuBLASLt BF16/FP8 GEMM). Time = wall time of R back-to-back launches / R after a warm-up (launch gaps
// included: decode ops this small are launch-bound until CUDA graphs are used).
//   cuda_ops_bench [--out results.md] [--quick]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda_roofline.h"
#include "ops/cuda/cuda_backend.h"

namespace di::bench {
namespace {

using namespace di::ops;

Backend* g_gpu = nullptr;
std::mt19937 g_rng(7);

struct Dev {
    Tensor t;
    Dev(DType dt, std::initializer_list<int64_t> shape, float lo = -1, float hi = 1)
        : t(g_gpu->allocator(), dt, shape) {
        Tensor h(host_allocator(), dt, {t.view().numel()});
        std::uniform_real_distribution<float> u(lo, hi);
        const size_t n = t.view().nbytes();
        if (dt == DType::kF32) {
            for (int64_t i = 0; i < t.view().numel(); ++i) h.view().ptr<float>()[i] = u(g_rng);
        } else if (dt == DType::kE8M0) {
            for (size_t i = 0; i < n; ++i)
                static_cast<uint8_t*>(h.view().data)[i] = uint8_t(121 + g_rng() % 7);
        } else if (dt == DType::kI32) {
            std::memset(h.view().data, 0, n);
        } else {
            for (size_t i = 0; i < n; ++i) {
                uint8_t x = uint8_t(g_rng());
                if ((x & 0x7f) == 0x7f) x = 0x3c;
                static_cast<uint8_t*>(h.view().data)[i] = x;
            }
        }
        g_gpu->copy(t.view().reshape({t.view().numel()}), h.view());
    }
    TensorView v() const { return t.view(); }
};

QWeight fp8_weight(std::vector<Dev>& keep, int64_t out, int64_t in) {
    keep.emplace_back(DType::kF8E4M3, std::initializer_list<int64_t>{out, in});
    keep.emplace_back(DType::kE8M0, std::initializer_list<int64_t>{(out + 127) / 128, (in + 127) / 128});
    return {WeightFormat::kFp8Block, keep[keep.size() - 2].v(), keep.back().v(), out, in};
}
QWeight fp4_weight(std::vector<Dev>& keep, int64_t out, int64_t in) {
    keep.emplace_back(DType::kFP4x2, std::initializer_list<int64_t>{out, in / 2});
    keep.emplace_back(DType::kE8M0, std::initializer_list<int64_t>{out, in / 32});
    return {WeightFormat::kFp4Group, keep[keep.size() - 2].v(), keep.back().v(), out, in};
}
QWeight bf16_weight(std::vector<Dev>& keep, int64_t out, int64_t in) {
    keep.emplace_back(DType::kBF16, std::initializer_list<int64_t>{out, in}, -0.1f, 0.1f);
    return {WeightFormat::kDense, keep.back().v(), {}, out, in};
}

struct Row {
    std::string name;
    double us, bytes, flops;
};

double time_us(const std::function<void()>& f, int reps) {
    for (int i = 0; i < 3; ++i) f();
    g_gpu->synchronize();
    double best = 1e30;
    for (int trial = 0; trial < 3; ++trial) {  // best of 3 batches of reps
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) f();
        g_gpu->synchronize();
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, us / reps);
    }
    return best;
}

std::vector<Row> run_ops(bool quick) {
    std::vector<Row> rows;
    std::vector<Dev> keep;
    keep.reserve(4096);
    auto linear = [&](const char* name, int64_t n, QWeight w, double wbytes) {
        Dev x(DType::kF32, {n, w.in_dim}), y(DType::kF32, {n, w.out_dim});
        LinearArgs a{x.v(), w, y.v()};
        const double us = time_us([&] { g_gpu->linear(a); }, n > 8 ? 5 : 50);
        rows.push_back({name, us, wbytes + 4.0 * n * (w.in_dim + w.out_dim), 2.0 * n * w.in_dim * w.out_dim});
    };
    const double fp8_scale_bytes = 1.0 / (128 * 128);
    {
        QWeight q_a = fp8_weight(keep, 1024, 4096), q_b = fp8_weight(keep, 64 * 512, 1024);
        QWeight o_b = fp8_weight(keep, 4096, 8192), kvp = bf16_weight(keep, 512, 4096);
        linear("linear fp8 q_a 4096->1024, n=1", 1, q_a, 4096.0 * 1024 * (1 + fp8_scale_bytes));
        linear("linear fp8 q_b 1024->32768, n=1", 1, q_b, 1024.0 * 32768);
        linear("linear fp8 o_b 8192->4096, n=1", 1, o_b, 8192.0 * 4096);
        linear("linear bf16 kv 4096->512, n=1", 1, kvp, 2.0 * 4096 * 512);
        linear("linear fp8 q_a 4096->1024, n=2048", 2048, q_a, 4096.0 * 1024);
        linear("linear fp8 o_b 8192->4096, n=2048", 2048, o_b, 8192.0 * 4096);
        linear("linear bf16 kv 4096->512, n=2048", 2048, kvp, 2.0 * 4096 * 512);
    }
    {  // attention: decode with window 128 + 512 CSA picks; prefill 2048 with HCA entries
        const int64_t H = 64, hd = 512, W = 128, T = 16384, k = 512;
        Dev ring(DType::kF32, {W - 1, hd}), comp(DType::kF32, {T, hd}), sinks(DType::kF32, {H});
        Dev q1(DType::kF32, {1, H, hd}), kv1(DType::kF32, {1, hd}), o1(DType::kF32, {1, H, hd});
        Dev picks(DType::kI32, {1, k});
        std::vector<int32_t> hp(k);
        for (int64_t i = 0; i < k; ++i) hp[size_t(i)] = int32_t(i * 31 % T);
        g_gpu->copy(picks.v(), TensorView::contiguous(hp.data(), DType::kI32, {1, k}));
        AttentionArgs a{q1.v(), ring.v(), kv1.v(), comp.v(),         picks.v(), sinks.v(), o1.v(),
                        70000,  127,      W,       CompMask::kPicks, 4,         0.044f};
        const double us = time_us([&] { g_gpu->attention(a); }, 50);
        rows.push_back({"attention decode, window 128 + 512 picks, 64x512", us,
                        4.0 * (W + k) * hd + 8.0 * H * hd, 4.0 * H * hd * (W + k)});
        const int64_t L = quick ? 256 : 2048, Th = 16;
        Dev qL(DType::kF32, {L, H, hd}), kvL(DType::kF32, {L, hd}), oL(DType::kF32, {L, H, hd});
        AttentionArgs b{qL.v(), ring.v(), kvL.v(), comp.v().rows(0, Th), {},  sinks.v(), oL.v(),
                        0,      0,        W,       CompMask::kCausal,    128, 0.044f};
        const double usL = time_us([&] { g_gpu->attention(b); }, 3);
        rows.push_back({"attention prefill L=" + std::to_string(L) + ", window 128 + HCA, 64x512", usL,
                        4.0 * (2.0 * L * H * hd + L * hd), 4.0 * L * H * hd * (W + Th)});
    }
    {  // indexer: decode over 16384 entries, prefill 512 queries
        const int64_t H = 64, dim = 128, T = 16384, k = 512;
        Dev keys(DType::kF32, {T, dim});
        for (int64_t L : {int64_t(1), int64_t(quick ? 64 : 512)}) {
            Dev q(DType::kF32, {L, H, dim}), w(DType::kF32, {L, H}), picks(DType::kI32, {L, k});
            IndexerTopkArgs a{q.v(), w.v(), keys.v(), picks.v(), 4 * T, 4, 0.125f, 0.088f};
            const double us = time_us([&] { g_gpu->indexer_topk(a); }, L == 1 ? 50 : 3);
            rows.push_back({"indexer_topk L=" + std::to_string(L) + ", T=16384, top-512, 64x128", us,
                            4.0 * T * dim + 4.0 * L * H * (dim + 1), 2.0 * L * T * H * dim});
        }
    }
    {  // mHC and norms at decode
        const int64_t hc = 4, D = 4096, M = (2 + hc) * hc;
        Dev st(DType::kF32, {1, hc, D}), fn(DType::kF32, {M, hc * D}), base(DType::kF32, {M}),
            sc(DType::kF32, {3});
        Dev x(DType::kF32, {1, D}), post(DType::kF32, {1, hc}), comb(DType::kF32, {1, hc, hc});
        Dev out(DType::kF32, {1, hc, D}), nw(DType::kBF16, {D});
        MhcPreArgs a{st.v(), fn.v(), base.v(), sc.v(), x.v(), post.v(), comb.v()};
        rows.push_back({"mhc_pre n=1, 4 x 4096", time_us([&] { g_gpu->mhc_pre(a); }, 50), 4.0 * M * hc * D,
                        2.0 * M * hc * D});
        MhcPostArgs p{st.v(), x.v(), post.v(), comb.v(), out.v()};
        rows.push_back({"mhc_post n=1, 4 x 4096", time_us([&] { g_gpu->mhc_post(p); }, 50), 4.0 * 3 * hc * D,
                        10.0 * hc * D});
        RmsNormArgs r{x.v(), nw.v(), x.v()};
        rows.push_back({"rms_norm n=1, 4096", time_us([&] { g_gpu->rms_norm(r); }, 50), 10.0 * D, 3.0 * D});
    }
    {  // routed experts, FP4, 256 experts x (2048 x 4096), k = 6
        const int64_t E = 256, D = 4096, I = 2048, k = 6;
        std::vector<ExpertWeights> ew(static_cast<size_t>(E));
        for (auto& e : ew)
            e.w1 = fp4_weight(keep, I, D), e.w3 = fp4_weight(keep, I, D), e.w2 = fp4_weight(keep, D, I);
        const double per_expert = 3.0 * (double(I) * D / 2 + double(I) * D / 32);
        for (int64_t n : {int64_t(1), int64_t(quick ? 16 : 128)}) {
            Dev x(DType::kF32, {n, D}), ids(DType::kI32, {n, k}), w(DType::kF32, {n, k}),
                out(DType::kF32, {n, D});
            std::vector<int32_t> hid(size_t(n * k));
            for (int64_t i = 0; i < n * k; ++i) hid[size_t(i)] = int32_t((i * 37 + i / k) % E);
            g_gpu->copy(ids.v(), TensorView::contiguous(hid.data(), DType::kI32, {n, k}));
            MoeArgs a{x.v(), ids.v(), w.v(), ew.data(), E, out.v(), 10.0f};
            const double us = time_us([&] { g_gpu->moe(a); }, n == 1 ? 20 : 2);
            const double distinct = double(std::min<int64_t>(E, n * k));
            rows.push_back({"moe fp4 n=" + std::to_string(n) + ", 256 experts, k=6", us,
                            distinct * per_expert, 2.0 * n * k * 3 * double(I) * D});
        }
    }
    return rows;
}

}  // namespace
}  // namespace di::bench

int main(int argc, char** argv) {
    using namespace di::bench;
    std::string out_path;
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--out") && i + 1 < argc)
            out_path = argv[++i];
        else if (!std::strcmp(argv[i], "--quick"))
            quick = true;
    }
    if (di::ops::cuda_device_count() == 0) {
        std::fprintf(stderr, "cuda_ops_bench: no CUDA device\n");
        return 1;
    }
    const Roofline r = measure_roofline();
    auto gpu = di::ops::make_cuda_backend(0);
    g_gpu = gpu.get();
    const auto rows = run_ops(quick);
    std::string md;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "Ceilings measured in this run: copy %.0f GB/s (read + write, 2 GiB device-to-device), "
                  "cuBLASLt 8192^3 BF16 %.0f TFLOP/s, FP8 %.0f TFLOP/s%s%s\n\n",
                  r.copy_gbps, r.bf16_tflops, r.fp8_tflops, r.note.empty() ? "" : "; ", r.note.c_str());
    md += buf;
    md +=
        "| op (V4-Flash shape) | time us | min bytes | GB/s | % copy BW | GFLOP | TFLOP/s | % BF16 GEMM |\n";
    md += "|---|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const Row& x : rows) {
        const double gbps = x.bytes / (x.us * 1e-6) / 1e9, tf = x.flops / (x.us * 1e-6) / 1e12;
        std::snprintf(buf, sizeof buf, "| %s | %.1f | %.3g | %.0f | %.1f%% | %.3g | %.2f | %.2f%% |\n",
                      x.name.c_str(), x.us, x.bytes, gbps, 100.0 * gbps / r.copy_gbps, x.flops / 1e9, tf,
                      r.bf16_tflops > 0 ? 100.0 * tf / r.bf16_tflops : 0.0);
        md += buf;
    }
    std::fputs(md.c_str(), stdout);
    if (!out_path.empty())
        if (FILE* f = std::fopen(out_path.c_str(), "w")) std::fputs(md.c_str(), f), std::fclose(f);
    return 0;
}
