// mHC's norm and mixing sums at a prefill's size for the native precision: the mixes on the TF32 tensor cores
// (mma.sync m16n8k8, streams and fn rows rounded to TF32 by cvt.rna, f32 sums), as DeepSeek's own inference
// runs this product (DeepGEMM's tf32_hc_prenorm_gemm); the sums of squares in f32 from the unrounded
// streams. The FP64 form (mhc_mix_dmma.cu) spends ~2x the streams' read time on f32 -> f64 conversions and
// DMMA; here the reads are the bound. The exact precision keeps the FP64 form.
// The same blocks, stages and output as mhc_mix_dmma_kernel: 32 tokens (two m16 groups) and a split of the
// columns a block (blockIdx.y), K tiles of 128 columns staged by cp.async (three stages), warp w takes
// columns 16 w .. 16 w + 15 of each tile (two k8 steps) for all 32 tokens x up to 24 mixes (three n8 groups);
// the eight warps' partial sums are added in warp order in double, so a token's sums depend on its own row
// only: deterministic and batch-invariant (the split count depends on the width only). Output: part[t][s][0]
// split s's sum of squares, part[t][s][1 + m] its mix m, as the FP64 form writes them.
#include <algorithm>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mhc_mix_stage.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {
namespace {

using namespace mhc_mix;

__device__ __forceinline__ uint32_t tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int NT, class S>  // n8 groups of mixes: ceil(M / 8); S the streams' type
__global__ void __launch_bounds__(kWarps * 32, 2) mhc_mix_tf32_kernel(MhcParams p, int M, double* part) {
    allow_early_next();
    extern __shared__ __align__(16) float st[];
    const int64_t width = p.hc * p.D, all_tiles = width / kKT, t0 = int64_t(blockIdx.x) * kTokens;
    const int64_t splits = gridDim.y, sp = blockIdx.y, k0 = sp * all_tiles / splits,
                  tiles = (sp + 1) * all_tiles / splits - k0;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    auto issue = [&](int64_t k) { issue_tile<NT, S>(p, M, st, t0, k0, k, tid); };
    float c[2][NT][4] = {};
    float ss[2][2] = {};  // [m16 group][row g, g + 8]
    for (int k = 0; k < kStages - 1; ++k) {
        if (k < tiles) issue(k);
        wg::cp_async_commit();
    }
    for (int64_t k = 0; k < tiles; ++k) {
        wg::cp_async_wait<kStages - 2>();
        __syncthreads();  // tile k landed for every thread; tile k - 1's stage is free
        if (k + kStages - 1 < tiles) issue(k + kStages - 1);
        wg::cp_async_commit();
        const float* s = st + (k % kStages) * kStageFloats;
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
            const int col = 16 * warp + 8 * ks + q;
            uint32_t b[NT][2];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const float* f = s + (kTokens + 8 * nt + g) * kLd + col;
                b[nt][0] = tf32(f[0]), b[nt][1] = tf32(f[4]);
            }
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                const int r = 16 * mt + g;
                const float v0 = staged_token<S>(s, r, col), v1 = staged_token<S>(s, r + 8, col),
                            v2 = staged_token<S>(s, r, col + 4), v3 = staged_token<S>(s, r + 8, col + 4);
                ss[mt][0] = fmaf(v0, v0, fmaf(v2, v2, ss[mt][0]));
                ss[mt][1] = fmaf(v1, v1, fmaf(v3, v3, ss[mt][1]));
                const uint32_t a[4] = {tf32(v0), tf32(v1), tf32(v2), tf32(v3)};
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) mma_tf32(c[mt][nt], a, b[nt][0], b[nt][1]);
            }
        }
    }
    wg::cp_async_wait<0>();
    __syncthreads();                              // the stages are free: the warps' partial sums go there
    double* red = reinterpret_cast<double*>(st);  // [warp][token][kOut]
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // token 16 mt + 8 h + g: the four lanes' columns, added in a fixed order
            double v = ss[mt][h];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            double* r = red + (warp * kTokens + 16 * mt + 8 * h + g) * kOut;
            if (q == 0) r[0] = v;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int j = 0; j < 2; ++j)
                    if (8 * nt + 2 * q + j < M) r[1 + 8 * nt + 2 * q + j] = c[mt][nt][2 * h + j];
        }
    __syncthreads();
    write_parts(p, M, red, part, t0, splits, sp, tid);
}

template <int NT>
void launch_nt(const MhcParams& p, int M, double* part, cudaStream_t s) {
    const dim3 grid(blocks_for(p.n, kTokens), unsigned(mhc_mix_dmma_splits(p)));
    hc::by_stream_type(p.bf16, [&](auto tag) {
        using S = typename decltype(tag)::type;
        raise_dynamic_smem(mhc_mix_tf32_kernel<NT, S>, kSmemBytes);
        mhc_mix_tf32_kernel<NT, S><<<grid, kWarps * 32, kSmemBytes, s>>>(p, M, part);
    });
}

}  // namespace

// The FP64 form's conditions (mhc_mix_dmma_supported) and splits: the same part layout for mhc_coef_kernel.
void launch_mhc_mix_tf32(const MhcParams& p, int M, double* part, Stream s) {
    if (M <= 8)
        launch_nt<1>(p, M, part, as_stream(s));
    else if (M <= 16)
        launch_nt<2>(p, M, part, as_stream(s));
    else
        launch_nt<3>(p, M, part, as_stream(s));
}

}  // namespace di::cuda
