// What mHC's two prefill mix kernels share (mhc_mix_dmma.cu on the FP64 tensor cores, mhc_mix_tf32.cu on the
// TF32 ones): a block's 32 tokens and split of the columns, K tiles of 128 columns staged by cp.async in
// three stages, and the partial sums' layout, part[t][s][0] split s's sum of squares, part[t][s][1 + m] its
// mix m, each the eight warps' sums added in warp order.
#pragma once

#include "ops/cuda/hc_streams.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda::mhc_mix {

constexpr int kTokens = 32, kWarps = 8, kKT = 128, kStages = 3;
constexpr int kLd = kKT + 4;  // a staged row's stride in floats: rows g and g + 1 4 banks apart
constexpr int kMaxRows = 24;  // mixes a block computes (hc = 4: 24; the head: 4)
constexpr int kStageFloats = (kTokens + kMaxRows) * kLd;
constexpr int kOut = kMaxRows + 1;  // sums a token: squares, then the mixes
constexpr size_t kSmemBytes = size_t(kStages) * kStageFloats * sizeof(float);
static_assert(size_t(kWarps) * kTokens * kOut * sizeof(double) <= kSmemBytes);

// A stage holds the token rows first, in the streams' type S (hc_streams.cuh) at tok_ld<S>() elements a row
// (f32: kLd; bf16: kKT + 8, rows g and g + 1 again 4 banks apart), then the fn rows at kTokens * kLd floats.
template <class S>
__host__ __device__ constexpr int tok_ld() {
    return sizeof(S) == 4 ? kLd : kKT + 8;
}
static_assert(kTokens * (kKT + 8) * 2 <= kTokens * kLd * 4 && (kKT + 8) * 2 % 16 == 0);
// Token row r's value at column `col` of a staged tile s, as f32.
template <class S>
__device__ __forceinline__ float staged_token(const float* s, int r, int col) {
    return hc::ld1(reinterpret_cast<const S*>(s) + r * tok_ld<S>() + col);
}

// Copies of tile k (of the split starting at tile k0) into its stage: token rows t0 .. (zeros past n) and fn
// rows (zeros past M), 16 bytes a copy.
template <int NT, class S>
__device__ __forceinline__ void issue_tile(const MhcParams& p, int M, float* st, int64_t t0, int64_t k0,
                                           int64_t k, int tid) {
    constexpr int kTokCopies = kKT * int(sizeof(S)) / 16, kPer = 16 / int(sizeof(S));  // a row's; elements
    const int64_t width = p.hc * p.D;
    float* s = st + (k % kStages) * kStageFloats;
    for (int i = tid; i < kTokens * kTokCopies + NT * 8 * (kKT / 4); i += kWarps * 32) {
        if (i < kTokens * kTokCopies) {
            const int r = i / kTokCopies, c = i % kTokCopies;
            const bool valid = t0 + r < p.n;
            const S* src = static_cast<const S*>(p.streams) + (valid ? t0 + r : 0) * width;
            wg::cp_async16(wg::smem_addr(reinterpret_cast<S*>(s) + r * tok_ld<S>() + kPer * c),
                           src + (k0 + k) * kKT + kPer * c, valid);
        } else {
            const int j = i - kTokens * kTokCopies, r = j / (kKT / 4), c4 = j % (kKT / 4);
            const bool valid = r < M;
            const float* src = p.fn + (valid ? r : 0) * p.ld_fn;
            wg::cp_async16(wg::smem_addr(s + (kTokens + r) * kLd + 4 * c4), src + (k0 + k) * kKT + 4 * c4,
                           valid);
        }
    }
}

// The block's partial sums out of red ([warp][token][kOut], written by the warps), added in warp order.
__device__ __forceinline__ void write_parts(const MhcParams& p, int M, const double* red, double* part,
                                            int64_t t0, int64_t splits, int64_t sp, int tid) {
    for (int i = tid; i < kTokens * (M + 1); i += kWarps * 32) {
        const int tok = i / (M + 1), m = i % (M + 1);
        if (t0 + tok >= p.n) continue;
        double acc = 0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) acc += red[(w * kTokens + tok) * kOut + m];
        part[((t0 + tok) * splits + sp) * (M + 1) + m] = acc;
    }
}

}  // namespace di::cuda::mhc_mix
