// The dequantise-to-FP8 baseline of a prefill chunk's MoE (moe_fp8_copy.h).
#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <tuple>

#include "moe_fp8_copy.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/fp8_gemm.h"

namespace di::bench {

using cuda::lt_rows;
using cuda::lt_scale_ld;
using cuda::LtFp8Gemm;
using cuda::WeightRef;

void bench_moe_fp8_copy(std::vector<GemmRow>& rows, cudaStream_t s, const std::vector<WeightRef>& table,
                        const std::vector<int32_t>& ids, int64_t E, int64_t D, int64_t I,
                        const std::string& label, double flops) {
    LtFp8Gemm* lt = LtFp8Gemm::instance();
    if (!lt) return;
    std::vector<int64_t> count(size_t(E), 0);
    for (int32_t e : ids) ++count[size_t(e)];
    // The copy: W1 and W3 of expert e as one [2I, D] matrix, W2 as [D, I]; f32 block scales in cuBLASLt's
    // layout. Rows of activations per expert padded to lt_rows, as the GEMM reads them.
    const int64_t ld_up = lt_scale_ld(D / 128), ld_dn = lt_scale_ld(I / 128);
    const size_t up_bytes = size_t(2 * I * D), dn_bytes = size_t(D * I);
    const size_t up_scales = size_t(2 * I / 128 * ld_up), dn_scales = size_t(D / 128 * ld_dn);
    int64_t rows_all = 0, largest = 0;
    for (int64_t c : count) rows_all += lt_rows(c), largest = std::max(largest, c);
    uint8_t *q_up = nullptr, *q_dn = nullptr, *qx = nullptr, *qh = nullptr;
    float *s_up = nullptr, *s_dn = nullptr, *sx = nullptr, *sh = nullptr, *y_up = nullptr, *y_dn = nullptr;
    void* tmp = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&q_up, up_bytes * size_t(E)));
    DI_CUDA_CHECK(cudaMalloc(&q_dn, dn_bytes * size_t(E)));
    DI_CUDA_CHECK(cudaMalloc(&s_up, up_scales * size_t(E) * 4));
    DI_CUDA_CHECK(cudaMalloc(&s_dn, dn_scales * size_t(E) * 4));
    DI_CUDA_CHECK(cudaMalloc(&qx, size_t(rows_all * D)));
    DI_CUDA_CHECK(cudaMalloc(&qh, size_t(rows_all * I)));
    DI_CUDA_CHECK(cudaMalloc(&sx, size_t(rows_all * D / 128) * 4));
    DI_CUDA_CHECK(cudaMalloc(&sh, size_t(rows_all * I / 128) * 4));
    DI_CUDA_CHECK(cudaMalloc(&y_up, size_t(rows_all * 2 * I) * 4));
    DI_CUDA_CHECK(cudaMalloc(&y_dn, size_t(rows_all * D) * 4));
    DI_CUDA_CHECK(cudaMalloc(&tmp, size_t(lt_rows(largest) * std::max(2 * I, D)) * 4));
    std::vector<Fp4ToFp8Job> jobs;
    for (int64_t e = 0; e < E; ++e) {
        if (count[size_t(e)] == 0) continue;  // only what the chunk routes to is converted
        const WeightRef &w1 = table[size_t(3 * e)], &w3 = table[size_t(3 * e + 1)],
                        &w2 = table[size_t(3 * e + 2)];
        uint8_t* up = q_up + up_bytes * size_t(e);
        float* su = s_up + up_scales * size_t(e);
        for (auto [w, q, sq] : {std::tuple{&w1, up, su}, std::tuple{&w3, up + I * D, su + I / 128 * ld_up}})
            jobs.push_back({static_cast<const uint8_t*>(w->data), static_cast<const uint8_t*>(w->scale),
                            w->ld, w->ld_scale, I, D, q, D, sq, ld_up});
        jobs.push_back({static_cast<const uint8_t*>(w2.data), static_cast<const uint8_t*>(w2.scale), w2.ld,
                        w2.ld_scale, D, I, q_dn + dn_bytes * size_t(e), I, s_dn + dn_scales * size_t(e),
                        ld_dn});
    }
    Fp4ToFp8Job* djobs = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&djobs, jobs.size() * sizeof(Fp4ToFp8Job)));
    DI_CUDA_CHECK(cudaMemcpy(djobs, jobs.data(), jobs.size() * sizeof(Fp4ToFp8Job), cudaMemcpyHostToDevice));
    const int64_t side = std::max(D, I);
    const double convert_us =
        graph_us(s, 2, [&](int) { launch_fp4_to_fp8(djobs, int64_t(jobs.size()), side, side, s); });
    DI_CUDA_CHECK(cudaGetLastError());

    // Each expert's token rows and SwiGLU outputs, quantised per 128 before the timing.
    const auto* x = static_cast<const float*>(random_device(size_t(largest * std::max(D, I)) * 4, 2));
    bool shapes_ok = true;
    {
        int64_t r = 0;
        for (int64_t e = 0; e < E; ++e) {
            const int64_t c = count[size_t(e)];
            if (c == 0) continue;
            shapes_ok = shapes_ok && lt->supports(c, D, 2 * I, D, 2 * I) && lt->supports(c, I, D, I, D);
            cuda::launch_act_quant_fp8(x, D, c, D, qx + r * D, sx + r * D / 128, lt_rows(c), s);
            cuda::launch_act_quant_fp8(x, I, c, I, qh + r * I, sh + r * I / 128, lt_rows(c), s);
            r += lt_rows(c);
        }
    }
    if (!shapes_ok) {
        rows.push_back({label, "fp8 copy + cuBLASLt: no algorithm for an expert's row count", 0, flops});
    } else {
        const double gemm_us = graph_us(s, 2, [&](int) {
            int64_t r = 0;
            for (int64_t e = 0; e < E; ++e) {
                const int64_t c = count[size_t(e)];
                if (c == 0) continue;
                lt->run(qx + r * D, sx + r * D / 128, q_up + up_bytes * size_t(e), D,
                        s_up + up_scales * size_t(e), c, D, 2 * I, y_up + r * 2 * I, 2 * I, tmp, s);
                lt->run(qh + r * I, sh + r * I / 128, q_dn + dn_bytes * size_t(e), I,
                        s_dn + dn_scales * size_t(e), c, I, D, y_dn + r * D, D, tmp, s);
                r += lt_rows(c);
            }
        });
        DI_CUDA_CHECK(cudaGetLastError());
        rows.push_back({label, "fp8 copy: the active experts converted", convert_us, flops});
        rows.push_back({label, "fp8 copy: cuBLASLt, up + down a GEMM per expert", gemm_us, flops});
        rows.push_back({label, "fp8 copy: both", convert_us + gemm_us, flops});
    }
    for (void* p : std::initializer_list<void*>{q_up, q_dn, qx, qh, s_up, s_dn, sx, sh, y_up, y_dn, tmp,
                                                djobs, const_cast<float*>(x)})
        cudaFree(p);
}

}  // namespace di::bench
