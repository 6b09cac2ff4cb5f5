// Decode kernels timed on their own, every variant: the linear GEMVs (V4-Flash shapes, n = 1..16) and the
// routed experts (n = 1, 8, 64), against the copy bandwidth measured in the same run. Each timing is a
// CUDA graph of back-to-back launches replayed (no host launch cost), rotating over enough weight copies
// (or expert choices) that the data cannot sit in the 50 MB L2: what the kernel costs inside a captured
// decode step. Attention decode and mhc_pre are timed without rotation (their few MB stay in L2: an
// optimistic figure for a step, where the previous layer has evicted them).
//   cuda_kernel_bench [--out results.md] [--quick] [--only
//   linear|gemm|moe|moe_prefill|attention|attention_prefill|mhc|indexer]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_attention_bench.h"
#include "cuda_bench_util.h"
#include "cuda_roofline.h"
#include "moe_fp8_copy.h"
#include "ops/cuda/bf16_gemm.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/kernels.h"
#include "ops/op_cases.h"

namespace di::bench {
namespace {

using namespace di::cuda;

struct WeightSet {
    std::vector<WeightRef> copies;
    double bytes = 0;  // one copy, data + scales
};

// fmt: 0 bf16, 1 fp8 block, 2 fp4 group. Enough copies that they span >= 256 MB.
WeightSet make_weights(int fmt, int64_t out, int64_t in) {
    WeightSet ws;
    const size_t data = fmt == 0 ? size_t(out * in * 2) : fmt == 1 ? size_t(out * in) : size_t(out * in / 2);
    const int64_t sr = fmt == 1 ? (out + 127) / 128 : out, sc = fmt == 1 ? (in + 127) / 128 : in / 32;
    const size_t scale = fmt == 0 ? 0 : size_t(sr * sc);
    ws.bytes = double(data + scale);
    const int n = int(std::max<double>(2, std::ceil(256e6 / ws.bytes)));
    for (int c = 0; c < n; ++c) {
        WeightRef w;
        w.data = random_device(data, fmt == 0 ? 3 : 0);
        w.scale = fmt == 0 ? nullptr : random_device(scale, 1);
        w.ld = fmt == 2 ? in / 2 : in;
        w.ld_scale = fmt == 0 ? 0 : sc;
        w.out_dim = out, w.in_dim = in;
        w.format = uint8_t(fmt == 0 ? 0 : fmt == 1 ? 1 : 2);
        w.dense_dt = Fdt::kBF16;
        w.scale_e8m0 = true;
        ws.copies.push_back(w);
    }
    return ws;
}

void free_weights(WeightSet& ws) {
    for (auto& w : ws.copies) cudaFree(const_cast<void*>(w.data)), cudaFree(const_cast<void*>(w.scale));
}

void bench_linear(std::vector<Row>& rows, cudaStream_t s, const char* name, int fmt, int64_t out, int64_t in,
                  const std::vector<int64_t>& ns) {
    WeightSet ws = make_weights(fmt, out, in);
    const int64_t nmax = *std::max_element(ns.begin(), ns.end());
    float* x = static_cast<float*>(random_device(size_t(nmax * in) * 4, 2));
    float* y = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&y, size_t(nmax * out) * 4));
    BenchScratch scratch;
    scratch.get(8, size_t(nmax * in + nmax * in / 128) * 4);  // before capture
    LtBf16x3Gemm* bf16x3 = fmt == 0 ? LtBf16x3Gemm::instance() : nullptr;
    if (bf16x3) scratch.get(7, LtBf16x3Gemm::tmp_bytes(nmax, in, out));  // before capture
    for (int64_t n : ns) {
        for (auto [vname, v] :
             {std::pair{"cublaslt_bf16x3", LinearVariant::kCublasLtBf16x3},
              std::pair{"mma", LinearVariant::kMma}, std::pair{"split_rows", LinearVariant::kSplitRows},
              std::pair{"stream_gemv", LinearVariant::kStreamGemv},
              std::pair{"warp_gemv", LinearVariant::kWarpGemv}, std::pair{"tiled", LinearVariant::kTiled}}) {
            if (v == LinearVariant::kCublasLtBf16x3 &&
                !(bf16x3 && bf16x3->supports(n, in, out, ws.copies[0].data, ws.copies[0].ld)))
                continue;
            if (v == LinearVariant::kMma && !linear_mma_supported(ws.copies[0], n)) continue;
            if (v == LinearVariant::kSplitRows && !gemv_split_supported(x, in, ws.copies[0], n)) continue;
            if (v == LinearVariant::kStreamGemv && !gemv_supported(x, in, ws.copies[0], n)) continue;
            if (v == LinearVariant::kWarpGemv && n > kGemvMaxRows) continue;  // the f32 fallbacks: one each
            if (v == LinearVariant::kTiled && n <= kGemvMaxRows) continue;
            const int reps = int(ws.copies.size()) * std::max(1, int(20 / ws.copies.size()));
            const double us = graph_us(s, reps, [&](int i) {
                const WeightRef& w = ws.copies[size_t(i) % ws.copies.size()];
                if (v == LinearVariant::kCublasLtBf16x3)
                    bf16x3->run(x, in, w.data, w.ld, n, in, out, y, out, scratch.get(7, 0), s);
                else if (v == LinearVariant::kMma)
                    launch_linear_mma(x, in, w, y, out, n, scratch, s);
                else
                    launch_linear(x, in, w, y, out, n, s, v);
            });
            DI_CUDA_CHECK(cudaGetLastError());
            rows.push_back(
                {std::string(name) + ", n=" + std::to_string(n), vname, us, ws.bytes + 4.0 * n * (in + out)});
        }
    }
    cudaFree(x), cudaFree(y);
    free_weights(ws);
}

// The native precision's fp8 linear as the backend runs it (quantise the activations, widen the weight's
// e8m0 scales, cuBLASLt block-scaled FP8), against the f32 kernels the exact precision runs.
void bench_fp8_gemm(std::vector<GemmRow>& rows, cudaStream_t s, const char* name, int64_t out, int64_t in,
                    const std::vector<int64_t>& ns) {
    LtFp8Gemm* lt = LtFp8Gemm::instance();
    if (!lt) return;
    WeightSet ws = make_weights(1, out, in);
    const int64_t nmax = *std::max_element(ns.begin(), ns.end());
    float* x = static_cast<float*>(random_device(size_t(nmax * in) * 4, 2));
    float *y = nullptr, *sx = nullptr, *sw = nullptr, *xd = nullptr;
    uint8_t* q = nullptr;
    void* tmp = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&y, size_t(nmax * out) * 4));
    DI_CUDA_CHECK(cudaMalloc(&q, size_t(lt_rows(nmax) * in)));
    DI_CUDA_CHECK(cudaMalloc(&sx, size_t(lt_rows(nmax) * in / 128) * 4));
    DI_CUDA_CHECK(cudaMalloc(&sw, size_t(out / 128 * lt_scale_ld(in / 128)) * 4));
    DI_CUDA_CHECK(cudaMalloc(&xd, size_t(nmax * in) * 4));
    DI_CUDA_CHECK(cudaMalloc(&tmp, size_t(lt_rows(nmax) * out) * 4));
    BenchScratch scratch;
    for (int64_t n : ns) {
        const double flops = 2.0 * double(n) * double(out) * double(in);
        const std::string label = std::string(name) + ", n=" + std::to_string(n);
        const int copies = int(ws.copies.size());
        const int reps = n >= 512 ? 10 : copies * std::max(1, 20 / copies);
        bool f32_out = false;
        const char* note = "";
        const bool ok = lt->supports(n, in, out, in, out, &f32_out, &note);
        if (n == ns[0]) std::printf("%s: cuBLASLt heuristic: %s\n", name, note);
        if (!ok) {
            rows.push_back({label, std::string("cublaslt_fp8: no algorithm (") + note + ")", 0, flops});
            continue;
        }
        rows.push_back({label, "act_quant alone",
                        graph_us(s, reps, [&](int) { launch_act_quant_fp8(x, in, n, in, q, sx, n, s); }),
                        flops});
        rows.push_back({label, f32_out ? "cublaslt_fp8 (f32 out)" : "cublaslt_fp8 (bf16 out, widened)",
                        graph_us(s, reps,
                                 [&](int i) {
                                     const WeightRef& w = ws.copies[size_t(i) % ws.copies.size()];
                                     launch_scales_to_f32(w.scale, true, w.ld_scale, out / 128, in / 128, sw,
                                                          lt_scale_ld(in / 128), s);
                                     launch_act_quant_fp8(x, in, n, in, q, sx, n, s);
                                     lt->run(q, sx, w.data, w.ld, sw, n, in, out, y, out, tmp, s);
                                 }),
                        flops});
        if (n <= kLinearFp8MmaMaxRows) {  // decode rows on the FP8 mma.sync kernel, with its quantiser launch
            rows.push_back({label, "fp8_mma alone",
                            graph_us(s, reps,
                                     [&](int i) {
                                         launch_linear_fp8mma(q, in, sx, n, nullptr, 0,
                                                              ws.copies[size_t(i) % ws.copies.size()], y, out,
                                                              n, s);
                                     }),
                            flops});
            rows.push_back({label, "act_quant + fp8_mma",
                            graph_us(s, reps,
                                     [&](int i) {
                                         launch_act_quant_fp8(x, in, n, in, q, sx, n, s);
                                         launch_linear_fp8mma(q, in, sx, n, nullptr, 0,
                                                              ws.copies[size_t(i) % ws.copies.size()], y, out,
                                                              n, s);
                                     }),
                            flops});
            if (n <= kLinearFp8MmaQuantRows)
                rows.push_back({label, "fp8_mma quantising in the kernel",
                                graph_us(s, reps,
                                         [&](int i) {
                                             launch_linear_fp8mma(nullptr, 0, nullptr, 0, x, in,
                                                                  ws.copies[size_t(i) % ws.copies.size()], y,
                                                                  out, n, s);
                                         }),
                                flops});
        }
        if (n >= 64) {  // the exact precision's tensor-core paths on f32 x
            scratch.get(8, size_t(n * in + n * (in / 128 + 1)) * 4);  // before capture
            for (auto [vname, gemm] : {std::pair{"exact: gemm (f32 x as hi + lo f16)", true},
                                       std::pair{"exact: mma (f32 x as hi + lo f16)", false}})
                rows.push_back({label, vname,
                                graph_us(s, std::min(reps, 20),
                                         [&](int i) {
                                             const WeightRef& w = ws.copies[size_t(i) % ws.copies.size()];
                                             if (gemm)
                                                 launch_linear_gemm(x, in, w, y, out, n, scratch, s);
                                             else
                                                 launch_linear_mma(x, in, w, y, out, n, scratch, s);
                                         }),
                                flops});
        }
        const LinearVariant f32v = n <= kGemvMaxRows ? LinearVariant::kStreamGemv : LinearVariant::kTiled;
        if (n > 512) continue;  // the f32 tiles take seconds at prefill sizes
        rows.push_back({label, n <= kGemvMaxRows ? "dequant + stream_gemv (f32)" : "dequant + tiled (f32)",
                        graph_us(s, std::min(reps, 20),
                                 [&](int i) {
                                     launch_act_quant_dequant(x, in, n, in, xd, s);
                                     launch_linear(xd, in, ws.copies[size_t(i) % ws.copies.size()], y, out, n,
                                                   s, f32v);
                                 }),
                        flops});
    }
    cudaFree(x), cudaFree(y), cudaFree(q), cudaFree(sx), cudaFree(sw), cudaFree(xd), cudaFree(tmp);
    free_weights(ws);
}

// The table's benchmark MoE shape (fp4 experts; its row count is swept here).
// Rows of more than kMoeGroupedMaxPairs pairs (a prefill's chunk) go to `prefill` with their FLOPs.
// skewed: each token's experts drawn with weights 1 / sqrt(rank + 1) over a shuffled ranking (the first by
// ~18% of the tokens, ~7x the average, as a router without load balancing may), where the default draws
// uniformly.
void bench_moe(std::vector<Row>& rows, std::vector<GemmRow>& prefill, cudaStream_t s,
               const di::ops::cases::MoeCase& c, const std::vector<int64_t>& ns, bool skewed = false) {
    const int64_t E = c.E, D = c.D, I = c.I, k = c.k;
    std::vector<WeightRef> table;
    for (int64_t e = 0; e < E; ++e)
        for (auto [o, i] : {std::pair{I, D}, std::pair{I, D}, std::pair{D, I}}) {
            WeightRef r;
            r.data = random_device(size_t(o * i / 2), 0);
            r.scale = random_device(size_t(o * i / 32), 1);
            DI_CUDA_CHECK(
                cudaMemset(const_cast<void*>(r.scale), 120, size_t(o * i / 32)));  // 2^-7, as the model draws
            r.ld = i / 2, r.ld_scale = i / 32, r.out_dim = o, r.in_dim = i, r.format = 2, r.scale_e8m0 = true;
            table.push_back(r);
        }
    WeightRef* dtable = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&dtable, table.size() * sizeof(WeightRef)));
    DI_CUDA_CHECK(cudaMemcpy(dtable, table.data(), table.size() * sizeof(WeightRef), cudaMemcpyHostToDevice));
    const double per_expert = 3.0 * (double(I) * D / 2 + double(I) * D / 32);
    BenchScratch scratch;
    for (int64_t n : ns) {
        constexpr int kSets = 8;  // different expert choices per launch: the L2 cannot keep them
        std::vector<int32_t*> ids(kSets);
        std::vector<int32_t> ids0;  // set 0's ids on the host: the fp8-copy baseline's expert rows
        double distinct = 0;
        for (int set = 0; set < kSets; ++set) {
            std::vector<int32_t> h(size_t(n * k));
            std::discrete_distribution<int32_t> pick;  // skewed: expert rank[e] drawn with weight 1/sqrt(e+1)
            if (skewed) {
                std::vector<int32_t> rank(E);
                std::iota(rank.begin(), rank.end(), 0);
                std::shuffle(rank.begin(), rank.end(), g_rng);
                std::vector<double> weight(static_cast<size_t>(E));
                for (int64_t e = 0; e < E; ++e)
                    weight[size_t(rank[size_t(e)])] = 1.0 / std::sqrt(double(e + 1));
                pick = std::discrete_distribution<int32_t>(weight.begin(), weight.end());
            }
            for (int64_t t = 0; t < n; ++t) {
                if (skewed) {
                    for (int64_t j = 0; j < k; ++j) {
                        int32_t e;
                        do e = pick(g_rng);
                        while (std::find(h.begin() + t * k, h.begin() + t * k + j, e) !=
                               h.begin() + t * k + j);
                        h[size_t(t * k + j)] = e;
                    }
                    continue;
                }
                std::vector<int32_t> perm(E);
                std::iota(perm.begin(), perm.end(), 0);
                std::shuffle(perm.begin(), perm.end(), g_rng);
                std::copy(perm.begin(), perm.begin() + k, h.begin() + t * k);
            }
            if (set == 0) ids0 = h;
            std::vector<int32_t> u = h;
            std::sort(u.begin(), u.end());
            distinct += double(std::unique(u.begin(), u.end()) - u.begin()) / kSets;
            DI_CUDA_CHECK(cudaMalloc(&ids[size_t(set)], h.size() * 4));
            DI_CUDA_CHECK(cudaMemcpy(ids[size_t(set)], h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        }
        float* x = static_cast<float*>(random_device(size_t(n * D) * 4, 2));
        float* w = static_cast<float*>(random_device(size_t(n * k) * 4, 2));
        float* out = nullptr;
        DI_CUDA_CHECK(cudaMalloc(&out, size_t(n * D) * 4));
        const E4m3Fold fold = fp4_scales_fold_to_e4m3(dtable, table.data(), int64_t(table.size()), s);
        MoeParams p{.x = x,
                    .ld_x = D,
                    .ids = nullptr,
                    .ld_ids = k,
                    .w = w,
                    .ld_w = k,
                    .table = dtable,
                    .n_experts = E,
                    .out = out,
                    .ld_out = D,
                    .n = n,
                    .k = k,
                    .D = D,
                    .I = I,
                    .limit = 10.0f,
                    .gemv_format = gemv_format(table[0]),
                    .mma_ok = fp4_scales_fold_to_f16(dtable, table.data(), int64_t(table.size()), s),
                    .scales_4b = scale_rows_aligned(table.data(), int64_t(table.size()), 4),
                    .scales_16b = scale_rows_aligned(table.data(), int64_t(table.size()), 16),
                    .e4m3_ok = fold.chunks,
                    .e4m3_rows = fold.rows};
        const bool big = n * k > kMoeGroupedMaxPairs;
        // a prefill's chunk also in native precision (quantised activations: hi halves only)
        for (const bool native : {false, true}) {
            if (native && n < 128) break;
            p.act_fp8 = native;
            for (auto [vname, v] :
                 {std::pair{"w4a8", MoeVariant::kW4a8}, std::pair{"wgmma", MoeVariant::kWgmma},
                  std::pair{"gemm", MoeVariant::kGemm}, std::pair{"mma", MoeVariant::kMma},
                  std::pair{"split_rows", MoeVariant::kSplitRows}, std::pair{"grouped", MoeVariant::kGrouped},
                  std::pair{"per_pair", MoeVariant::kPerPair}}) {
                p.ids = ids[0];
                const bool tiled =
                    v == MoeVariant::kGemm || v == MoeVariant::kWgmma || v == MoeVariant::kW4a8;
                if (v == MoeVariant::kW4a8 && !moe_w4a8_supported(p, true)) continue;
                if (skewed && v != MoeVariant::kW4a8) continue;  // the routing's effect on the prefill kernel
                if (v == MoeVariant::kGemm && !moe_gemm_supported(p, true)) continue;
                if (v == MoeVariant::kWgmma && !moe_wgmma_supported(p, true)) continue;
                if ((big || native) && !tiled) continue;  // the others take at most kMoeGroupedMaxPairs
                if (v == MoeVariant::kMma && !moe_mma_supported(p)) continue;
                if (v == MoeVariant::kSplitRows && !moe_split_supported(p)) continue;
                if (v == MoeVariant::kGrouped && !moe_grouped_supported(p)) continue;
                scratch.get(1, size_t(n * k * I) * 4),
                    scratch.get(2, size_t(n * k * D) * 4);  // before capture
                scratch.get(3, size_t(2 + 2 * std::min<int64_t>(n * k, E) + n * k) * 4);
                scratch.get(8, size_t(n * D + n * k * I + n * D / 128 + n * k * I / 128) * 4);
                const double us = graph_us(s, 2 * kSets, [&](int i) {
                    MoeParams q = p;
                    q.ids = ids[size_t(i % kSets)];
                    launch_moe(q, scratch, s, v);
                });
                DI_CUDA_CHECK(cudaGetLastError());
                if (n >= 128)  // a prefill's chunk: compute-bound, in TFLOP/s
                    prefill.push_back({"moe fp4 n=" + std::to_string(n) + ", " + std::to_string(E) +
                                           " experts, k=" + std::to_string(k) +
                                           (native ? " (native: quantised activations" +
                                                         std::string(skewed ? ", skewed routing)" : ")")
                                                   : " (exact: hi + lo f16 products)"),
                                       vname, us, 2.0 * 3.0 * double(n * k) * double(D) * double(I)});
                else
                    rows.push_back({"moe fp4 n=" + std::to_string(n) + ", " + std::to_string(E) +
                                        " experts, k=" + std::to_string(k) + " (" +
                                        std::to_string(int(distinct + 0.5)) + " experts read)",
                                    vname, us, distinct * per_expert + 4.0 * n * D * 2});
            }
            if (native && big && !skewed)  // what w4a8 is for: against dequantising to an fp8 copy
                bench_moe_fp8_copy(prefill, s, table, ids0, E, D, I,
                                   "moe fp4 n=" + std::to_string(n) + ", " + std::to_string(E) +
                                       " experts, k=" + std::to_string(k) +
                                       " (native: quantised activations)",
                                   2.0 * 3.0 * double(n * k) * double(D) * double(I));
        }
        for (auto* d : ids) cudaFree(d);
        cudaFree(x), cudaFree(w), cudaFree(out);
    }
    for (auto& r : table) cudaFree(const_cast<void*>(r.data)), cudaFree(const_cast<void*>(r.scale));
    cudaFree(dtable);
}

// mhc_pre of n tokens, hc 4 x 4096: bytes = fn (24 x 16384 f32) + streams + x.
void bench_mhc(std::vector<Row>& rows, cudaStream_t s, int64_t n) {
    const int64_t hc = 4, D = 4096, M = (2 + hc) * hc;
    float* st = static_cast<float*>(random_device(size_t(n * hc * D) * 4, 2));
    float* fn = static_cast<float*>(random_device(size_t(M * hc * D) * 4, 2));
    float* base = static_cast<float*>(random_device(size_t(M) * 4, 2));
    float* scale = static_cast<float*>(random_device(3 * 4, 2));
    float *x = nullptr, *post = nullptr, *comb = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&x, size_t(n * D) * 4));
    DI_CUDA_CHECK(cudaMalloc(&post, size_t(n * hc) * 4));
    DI_CUDA_CHECK(cudaMalloc(&comb, size_t(n * hc * hc) * 4));
    MhcParams p{.streams = st,
                .fn = fn,
                .ld_fn = hc * D,
                .base = base,
                .scale = scale,
                .x = x,
                .ld_x = D,
                .post = post,
                .ld_post = hc,
                .comb = comb,
                .ld_comb = hc * hc,
                .n = n,
                .hc = hc,
                .D = D,
                .norm_eps = 1e-6f,
                .hc_eps = 1e-6f,
                .sinkhorn_iters = 20,
                .head = false};
    BenchScratch scratch;
    for (auto [vname, v] :
         {std::pair{"split_k", MhcVariant::kSplitK}, std::pair{"per_mix", MhcVariant::kPerMix}}) {
        launch_mhc_pre(p, scratch, s, v);
        const double us = graph_us(s, 20, [&](int) { launch_mhc_pre(p, scratch, s, v); });
        DI_CUDA_CHECK(cudaGetLastError());
        rows.push_back({"mhc_pre hc 4 x 4096, n=" + std::to_string(n), vname, us,
                        4.0 * (M * hc * D + n * hc * D + n * D)});
    }
    cudaFree(st), cudaFree(fn), cudaFree(base), cudaFree(scale), cudaFree(x), cudaFree(post), cudaFree(comb);
}

// V4-Flash's indexer (64 heads x 128, CSA rate 4) on L queries from position pos0 over T entries, top-k.
IndexerParams flash_indexer(const float* q, const float* w, const float* keys, int32_t* picks, int64_t L,
                            int64_t T, int64_t k, int64_t pos0) {
    constexpr int64_t H = 64, dim = 128;
    return {.q = q,
            .q_s0 = H * dim,
            .q_s1 = dim,
            .w = w,
            .ld_w = H,
            .keys = keys,
            .ld_keys = dim,
            .picks = picks,
            .ld_picks = k,
            .L = L,
            .H = H,
            .dim = dim,
            .T = T,
            .k = k,
            .pos0 = pos0,
            .rate = 4,
            .weight_scale = 0.125f,
            .score_scale = 0.088f};
}

// The indexer's decode step for one query: scores of 64 heads x 128 over T compressed entries, then the
// top-min(512, T). Bytes: the keys read once + q.
// `jobs` sequences' decode queries at once (launch_indexer_topks), each with keys of its own.
void bench_indexer(std::vector<Row>& rows, cudaStream_t s, const char* name, int64_t T, int64_t jobs = 1) {
    const int64_t H = 64, dim = 128, k = std::min<int64_t>(512, T);
    float* q = static_cast<float*>(random_device(size_t(H * dim) * 4, 2));
    float* w = static_cast<float*>(random_device(size_t(H) * 4, 2));
    float* keys = static_cast<float*>(random_device(size_t(jobs * T * dim) * 4, 2));
    int32_t* picks = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&picks, size_t(jobs * k) * 4));
    std::vector<IndexerParams> ps;
    for (int64_t j = 0; j < jobs; ++j)
        ps.push_back(flash_indexer(q, w, keys + j * T * dim, picks + j * k, 1, T, k, 4 * T));
    BenchScratch scratch;
    for (auto [vname, v] :
         {std::pair{"tiled", IndexerVariant::kTiled}, std::pair{"warp_heads", IndexerVariant::kWarpHeads},
          std::pair{"block", IndexerVariant::kBlock}}) {
        if (jobs > 1 && v == IndexerVariant::kBlock) continue;  // not batched
        auto run = [&] {
            if (jobs == 1)
                launch_indexer_topk(ps[0], scratch, s, v);
            else
                launch_indexer_topks(ps.data(), jobs, scratch, s, v);
        };
        run();
        // the batched job table's upload is a pageable copy, which a graph cannot hold
        const double us =
            jobs == 1 ? graph_us(s, 20, [&](int) { run(); }) : stream_us(s, 20, [&](int) { run(); });
        DI_CUDA_CHECK(cudaGetLastError());
        rows.push_back({name, vname, us, 4.0 * double(jobs * T * dim + H * dim)});
    }
    cudaFree(q), cudaFree(w), cudaFree(keys), cudaFree(picks);
}

// The indexer of a prefill chunk: L queries from position 0 over the chunk's T = L / 4 entries, top-min(512,
// T): the native precision's tensor-core scores (mma, f16 q and keys) against the f32 tiles. Bytes: q, w and
// the keys read once.
void bench_indexer_prefill(std::vector<Row>& rows, cudaStream_t s, int64_t L) {
    const int64_t H = 64, dim = 128, T = L / 4, k = std::min<int64_t>(512, T);
    float* q = static_cast<float*>(random_device(size_t(L * H * dim) * 4, 2));
    float* w = static_cast<float*>(random_device(size_t(L * H) * 4, 2));
    float* keys = static_cast<float*>(random_device(size_t(T * dim) * 4, 2));
    int32_t* picks = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&picks, size_t(L * k) * 4));
    IndexerParams p = flash_indexer(q, w, keys, picks, L, T, k, 0);
    BenchScratch scratch;
    const std::string name = fmt::format("indexer prefill, {} queries from 0, top-{} of {} entries", L, k, T);
    for (auto [vname, v, f16] : {std::tuple{"mma (native: f16 q and keys)", IndexerVariant::kMma, true},
                                 std::tuple{"tiled", IndexerVariant::kTiled, false}}) {
        p.f16 = f16;
        if (v == IndexerVariant::kMma && !indexer_mma_supported(p)) continue;
        auto run = [&] { launch_indexer_topk(p, scratch, s, v); };
        run();
        const double us = stream_us(s, 10, [&](int) { run(); });
        DI_CUDA_CHECK(cudaGetLastError());
        rows.push_back({name, vname, us, 4.0 * double(L * H * dim + L * H + T * dim)});
    }
    cudaFree(q), cudaFree(w), cudaFree(keys), cudaFree(picks);
}

}  // namespace
}  // namespace di::bench

int main(int argc, char** argv) {
    using namespace di::bench;
    std::string out_path, only;
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--out") && i + 1 < argc)
            out_path = argv[++i];
        else if (!std::strcmp(argv[i], "--quick"))
            quick = true;
        else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        std::fprintf(stderr, "cuda_kernel_bench: no CUDA device\n");
        return 1;
    }
    const Roofline r = measure_roofline();
    (void)sm_count();  // cached before any capture
    cudaStream_t s;
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<Row> rows;
    const std::vector<int64_t> ns = quick ? std::vector<int64_t>{1, 4} : std::vector<int64_t>{1, 2, 4, 8, 16};
    auto want = [&](const char* group) { return only.empty() || only == group; };
    if (want("linear")) {
        for (const di::ops::cases::LinearCase& c : di::ops::cases::linear_cases(di::ops::cases::kBench)) {
            const int fmt = c.fmt == di::ops::WeightFormat::kDense      ? 0
                            : c.fmt == di::ops::WeightFormat::kFp8Block ? 1
                                                                        : 2;
            const std::string name = std::string(fmt == 0   ? "bf16 "
                                                 : fmt == 1 ? "fp8 "
                                                            : "fp4 ") +
                                     c.name + " " + std::to_string(c.in) + "->" + std::to_string(c.out);
            const bool head = c.out > 100000;  // 1 GB: fewer row counts
            std::vector<int64_t> cn = head ? std::vector<int64_t>{1, 4, 16} : ns;
            if (fmt == 1 && quick) cn.push_back(16);  // fp8: batched decode on mma's token groups
            if (fmt <= 1) cn.push_back(64);  // bf16, fp8: the tensor-core variants against the f32 tiles
            bench_linear(rows, s, name.c_str(), fmt, c.out, c.in, cn);
        }
    }
    std::vector<GemmRow> gemm_rows;
    if (want("gemm")) {
        const std::vector<int64_t> gn =
            quick ? std::vector<int64_t>{1, 16, 4096} : std::vector<int64_t>{1, 16, 64, 512, 4096};
        bench_fp8_gemm(gemm_rows, s, "fp8 q_a 4096->1024", 1024, 4096, gn);
        bench_fp8_gemm(gemm_rows, s, "fp8 wkv 4096->512", 512, 4096, gn);
        bench_fp8_gemm(gemm_rows, s, "fp8 q_b 1024->32768", 32768, 1024, gn);
        bench_fp8_gemm(gemm_rows, s, "fp8 wo_a group 4096->1024", 1024, 4096, gn);
        bench_fp8_gemm(gemm_rows, s, "fp8 o_b 8192->4096", 4096, 8192, gn);
        bench_fp8_gemm(gemm_rows, s, "fp8 index q_b 1024->8192", 8192, 1024, gn);
        bench_fp8_gemm(gemm_rows, s, "fp8 shared w1 4096->2048", 2048, 4096, gn);
        bench_fp8_gemm(gemm_rows, s, "fp8 shared w2 2048->4096", 4096, 2048, gn);
    }
    if (want("moe"))
        for (const di::ops::cases::MoeCase& c : di::ops::cases::moe_cases(di::ops::cases::kBench))
            bench_moe(rows, gemm_rows, s, c,
                      quick ? std::vector<int64_t>{1, 8} : std::vector<int64_t>{1, 8, 64});
    if (want("moe_prefill"))  // 1024 and 16380 pairs: the chunks of mma and of gemm; 24576: a 4,096-token
                              // chunk
        for (const di::ops::cases::MoeCase& c : di::ops::cases::moe_cases(di::ops::cases::kBench)) {
            bench_moe(rows, gemm_rows, s, c, {170, 2730, 4096});
            bench_moe(rows, gemm_rows, s, c, {4096}, true);  // w4a8 on skewed routing
        }
    if (want("attention")) {
        bench_attention(rows, s, "attention decode, window 128 + all 512 HCA entries (64K context)",
                        AttnCompMask::kCausal, 512);
        bench_attention(rows, s, "attention decode, window 128 + 512 CSA picks of 16384 (64K context)",
                        AttnCompMask::kPicks, 16384);
        bench_attention(rows, s, "attention decode, window 128 + all 8192 HCA entries (1M context)",
                        AttnCompMask::kCausal, 8192);
    }
    std::vector<GemmRow> attn_rows;
    if (want("attention_prefill")) {
        bench_attention_prefill(attn_rows, s, "4,096 queries from 0, sliding window 128", AttnCompMask::kNone,
                                4096);
        bench_attention_prefill(attn_rows, s, "4,096 queries from 0, window + HCA entries (rate 128)",
                                AttnCompMask::kCausal, 4096);
        bench_attention_prefill(attn_rows, s, "4,096 queries from 0, window + 512 CSA picks (rate 4)",
                                AttnCompMask::kPicks, 4096);
    }
    if (want("mhc"))
        for (int64_t n : {1, 4, 64}) bench_mhc(rows, s, n);
    if (want("indexer")) {
        bench_indexer(rows, s, "indexer decode, 5 entries (short prompt)", 5);
        bench_indexer(rows, s, "indexer decode, top-512 of 4096 entries (16K context)", 4096);
        bench_indexer(rows, s, "indexer decode, top-512 of 16384 entries (64K context)", 16384);
        bench_indexer(rows, s, "indexer decode, top-512 of 262144 entries (1M context)", 262144);
        bench_indexer_prefill(rows, s, 4096);
        bench_indexer(rows, s, "indexer decode, 16 sequences, top-512 of 16384 entries each (64K context)",
                      16384, 16);
    }

    std::string md;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "Copy bandwidth measured in this run: %.0f GB/s (read + write, 2 GiB).\n\n", r.copy_gbps);
    md += buf;
    md +=
        "| kernel (V4-Flash shape) | variant | time us | bytes | GB/s | % copy BW "
        "|\n|---|---|---:|---:|---:|---:|\n";
    for (const Row& x : rows) {
        const double gbps = x.bytes / (x.us * 1e-6) / 1e9;
        std::snprintf(buf, sizeof buf, "| %s | %s | %.2f | %.3g | %.0f | %.1f%% |\n", x.name.c_str(),
                      x.variant.c_str(), x.us, x.bytes, gbps, 100.0 * gbps / r.copy_gbps);
        md += buf;
    }
    if (!gemm_rows.empty()) {
        std::snprintf(buf, sizeof buf,
                      "\nTensor-core products: the FP8 linears of the native precision (times include the "
                      "activation quantisation and the weight-scale widening) and a prefill's MoE; dense "
                      "cuBLASLt rates in this run: FP8 %.0f, BF16 %.0f TFLOP/s.\n\n",
                      r.fp8_tflops, r.bf16_tflops);
        md += rate_table(buf, "linear (V4-Flash shape) | path", gemm_rows, r.fp8_tflops, "FP8");
    }
    if (!attn_rows.empty()) {
        std::snprintf(
            buf, sizeof buf,
            "\nAttention prefill of V4-Flash's shape (64 heads x 512, f16 operands, f32 sums), against "
            "the dense BF16 cuBLASLt rate in this run: %.0f TFLOP/s.\n\n",
            r.bf16_tflops);
        md += rate_table(buf, "attention prefill | variant", attn_rows, r.bf16_tflops, "BF16");
    }
    std::fputs(md.c_str(), stdout);
    if (!out_path.empty())
        if (FILE* f = std::fopen(out_path.c_str(), "w")) std::fputs(md.c_str(), f), std::fclose(f);
    return 0;
}
