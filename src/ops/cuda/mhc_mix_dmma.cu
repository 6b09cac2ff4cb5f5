// mHC's norm and mixing sums at a prefill's size on the FP64 tensor cores (mma.sync m8n8k4 f64): the
// streams and fn rows widened to double (exact), their products and sums in double, so the result is at
// least as close to the reference's double sums as split_k's (which sums four f32 products before widening).
// split_k spends its time on the f32 -> f64 conversions of every product and a warp's shuffle tree per token
// and split (~215 us for 4,096 tokens of V4-Flash's 16,384-wide streams, where reading them takes ~65 us);
// here each element is widened once and the tensor cores sum.
// Block: 32 tokens, a split's columns (kSplits splits of the width, blockIdx.y; two blocks an SM, so that a
// 4,096-token prefill's 128 token blocks fill the SMs four times over: one block an SM of 8 warps, all
// columns, took 237 us an H100 call at 1.14 TB/s); K tiles of 128 columns staged by cp.async (three stages);
// warp w takes columns 16 w .. 16 w + 15 of each tile (four k4 steps), all 32 tokens (four m8 groups) x up to
// 24 mixes (three n8 groups); at the end the eight warps' partial sums are added in warp order, so a token's
// sums depend on its own row only: deterministic and batch-invariant (the split count depends on the width
// only). Output: part[t][s][0] split s's sum of squares, part[t][s][1 + m] its mix m (the finish kernel's
// partials).
#include <algorithm>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mhc_mix_stage.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {
namespace {

using namespace mhc_mix;
constexpr int kSplits = 4;

__device__ __forceinline__ void dmma(double (&c)[2], double a, double b) {
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
                 : "+d"(c[0]), "+d"(c[1])
                 : "d"(a), "d"(b));
}

template <int NT, class S>  // n8 groups of mixes: ceil(M / 8); S the streams' type
__global__ void __launch_bounds__(kWarps * 32, 2) mhc_mix_dmma_kernel(MhcParams p, int M, double* part) {
    allow_early_next();
    extern __shared__ __align__(16) float st[];
    const int64_t width = p.hc * p.D, all_tiles = width / kKT, t0 = int64_t(blockIdx.x) * kTokens;
    const int64_t splits = gridDim.y, sp = blockIdx.y, k0 = sp * all_tiles / splits,
                  tiles = (sp + 1) * all_tiles / splits - k0;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    auto issue = [&](int64_t k) { issue_tile<NT, S>(p, M, st, t0, k0, k, tid); };
    double c[4][NT][2] = {};
    double ss[4] = {};
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
        for (int step = 0; step < 4; ++step) {
            const int col = 16 * warp + 4 * step + q;
            double a[4], b[NT];
#pragma unroll
            for (int tg = 0; tg < 4; ++tg) a[tg] = double(staged_token<S>(s, 8 * tg + g, col));
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) b[nt] = double(s[(kTokens + 8 * nt + g) * kLd + col]);
#pragma unroll
            for (int tg = 0; tg < 4; ++tg) {
                ss[tg] = fma(a[tg], a[tg], ss[tg]);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) dmma(c[tg][nt], a[tg], b[nt]);
            }
        }
    }
    wg::cp_async_wait<0>();
    __syncthreads();                              // the stages are free: the warps' partial sums go there
    double* red = reinterpret_cast<double*>(st);  // [warp][token][kOut]
#pragma unroll
    for (int tg = 0; tg < 4; ++tg) {
        double v = ss[tg];  // token 8 tg + g: the four lanes' columns, added in a fixed order
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        double* r = red + (warp * kTokens + 8 * tg + g) * kOut;
        if (q == 0) r[0] = v;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j)
                if (8 * nt + 2 * q + j < M) r[1 + 8 * nt + 2 * q + j] = c[tg][nt][j];
    }
    __syncthreads();
    write_parts(p, M, red, part, t0, splits, sp, tid);
}

}  // namespace

bool mhc_mix_dmma_supported(const MhcParams& p, int M) {
    return M <= kMaxRows && (p.hc * p.D) % kKT == 0 && p.ld_fn % 4 == 0 &&
           reinterpret_cast<uintptr_t>(p.streams) % 16 == 0 && reinterpret_cast<uintptr_t>(p.fn) % 16 == 0;
}

int64_t mhc_mix_dmma_splits(const MhcParams& p) { return std::min<int64_t>(kSplits, p.hc * p.D / kKT); }

namespace {
template <int NT>
void launch_nt(const MhcParams& p, int M, double* part, cudaStream_t s) {
    const dim3 grid(blocks_for(p.n, kTokens), unsigned(mhc_mix_dmma_splits(p)));
    hc::by_stream_type(p.bf16, [&](auto tag) {
        using S = typename decltype(tag)::type;
        raise_dynamic_smem(mhc_mix_dmma_kernel<NT, S>, kSmemBytes);
        mhc_mix_dmma_kernel<NT, S><<<grid, kWarps * 32, kSmemBytes, s>>>(p, M, part);
    });
}
}  // namespace

void launch_mhc_mix_dmma(const MhcParams& p, int M, double* part, Stream s) {
    if (M <= 8)
        launch_nt<1>(p, M, part, as_stream(s));
    else if (M <= 16)
        launch_nt<2>(p, M, part, as_stream(s));
    else
        launch_nt<3>(p, M, part, as_stream(s));
}

}  // namespace di::cuda
