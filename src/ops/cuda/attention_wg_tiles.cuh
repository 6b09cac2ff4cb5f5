// What the warpgroup attention kernels (attention_wg.cu, attention_wgp.cu) share: the 128-byte swizzled tile
// of 64 rows x 512 halves their q and key tiles use, q turned into such a tile, and the output rows' store.
#pragma once

#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_frag.cuh"

namespace di::cuda::wgtile {

inline constexpr uint32_t kChunkBytes = 64 * 128;        // 64 rows x 64 halves
inline constexpr uint32_t kTileBytes = 8 * kChunkBytes;  // 64 rows x 512 halves

// Byte offset of the 16-byte unit u (of 64 along a row of 512 halves) of row r in a swizzled tile.
__device__ __forceinline__ uint32_t unit_at(int r, int u) {
    return uint32_t(u >> 3) * kChunkBytes + uint32_t(r) * 128u + uint32_t(((u & 7) ^ (r & 7)) << 4);
}

// Query t's heads h0 .. h0 + 63 as f16 times 2^shq into the swizzled tile at `tile`, shq from their max |q|,
// by threads i = 0 .. 255 (unit i % 64 of rows i / 64 + 4 k); max_of(v) gives the max of v over those 256
// threads. Returns p.scale / 2^shq, the scores' scale.
template <typename MaxOf>
__device__ __forceinline__ float q_tile_f16(const AttentionParams& p, int64_t t, int64_t h0, int i,
                                            unsigned char* tile, MaxOf max_of) {
    const int u = i & 63, r0 = i >> 6;
    const float* qb = p.q + t * p.q_s0 + h0 * p.q_s1 + u * 8;
    float qmax = 0.0f;
    for (int k = 0; k < 16; ++k) {
        const float* src = qb + (r0 + 4 * k) * p.q_s1;
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
            const float2 v = *reinterpret_cast<const float2*>(src + e);
            qmax = fmaxf(qmax, fmaxf(fabsf(v.x), fabsf(v.y)));
        }
    }
    const int shq = mma::chunk_shift(max_of(qmax));
    const float s = mma::pow2f(shq);
    for (int k = 0; k < 16; ++k) {
        const int row = r0 + 4 * k;
        const float* src = qb + row * p.q_s1;
        uint32_t w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 v = *reinterpret_cast<const float2*>(src + 2 * e);
            w[e] = mma::pack_f16x2(v.x * s, v.y * s);
        }
        *reinterpret_cast<uint4*>(tile + unit_at(row, u)) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    return scalbnf(p.scale, -shq);
}

// A warp's output rows from m64n256 accumulators: heads h and h + 8 (o[4j], o[4j + 1] and o[4j + 2],
// o[4j + 3]), columns col + 8j (+1), times inv[0] and inv[1].
__device__ __forceinline__ void store_out_rows(const AttentionParams& p, int64_t t, int64_t h, int64_t col,
                                               const float (&o)[128], const float (&inv)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float* dst = p.out + t * p.o_s0 + (h + 8 * i) * p.o_s1 + col;
#pragma unroll
        for (int j = 0; j < 32; ++j)
            *reinterpret_cast<float2*>(dst + 8 * j) =
                make_float2(o[4 * j + 2 * i] * inv[i], o[4 * j + 2 * i + 1] * inv[i]);
    }
}

}  // namespace di::cuda::wgtile
