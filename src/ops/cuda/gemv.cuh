// Bandwidth-bound dot products of weight rows with a few f32 token rows (decode GEMV and the MoE experts).
// A weight row is read in 16-byte units (f32: 4 elements, bf16/f16: 8, fp8: 16, fp4: 32), so every load is
// 128 bits wide and coalesced across the warp that owns the row; each lane keeps U units of R rows in
// flight. The token rows are staged once per block in shared memory, one padded row of E + 4 floats per
// unit: lane l reads the x of its own unit l + 32 j, which in global memory would touch a different cache
// line per lane (32 lines per fp4 load), and the 16-byte pad keeps each quarter-warp on distinct banks.
// Quantised units are accumulated unscaled and multiplied by their scale once (one scale per unit: fp8 units
// sit inside one 128x128 block, an fp4 unit is one 32-group), which is exact for power-of-two (UE8M0) scales
// up to the f32 rounding of the sums. Accumulation order per (row, token) depends only on K and R, never on
// how many tokens share the pass: results are batch-invariant among the n that use this path with the same R.
#pragma once

#include <cuda_fp8.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/smem_limit.h"

namespace di::cuda::gemv {

enum Format : int { kF32 = 0, kBF16 = 1, kF16 = 2, kFp8 = 3, kFp4 = 4 };

// Elements in one 16-byte unit of format f (host and device).
__host__ __device__ constexpr int unit_elems(int f) {
    return f == kF32 ? 4 : f == kFp8 ? 16 : f == kFp4 ? 32 : 8;
}

template <int F>
struct UnitOf {
    static constexpr int kElems = unit_elems(F);
};

__device__ __forceinline__ float4 ldg4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// acc[t] += sum_j v[j] * x_t[j] for 8 consecutive elements at xs[t] + k (shared memory, 16-byte aligned).
template <int NT>
__device__ __forceinline__ void fma8(const float v[8], const float* const xs[NT], int nt, int k,
                                     float acc[NT]) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        if (t >= nt) break;
        const float4 a = *reinterpret_cast<const float4*>(xs[t] + k);
        const float4 b = *reinterpret_cast<const float4*>(xs[t] + k + 4);
        float s = acc[t];
        s = fmaf(v[0], a.x, s);
        s = fmaf(v[1], a.y, s);
        s = fmaf(v[2], a.z, s);
        s = fmaf(v[3], a.w, s);
        s = fmaf(v[4], b.x, s);
        s = fmaf(v[5], b.y, s);
        s = fmaf(v[6], b.z, s);
        s = fmaf(v[7], b.w, s);
        acc[t] = s;
    }
}

// Eight fp4 e2m1 values (one 32-bit word, element 2j = low nibble of byte j) as f32 times 2^-14: each
// nibble's 3 magnitude bits become f16 exponent+mantissa bits, which is exact; the caller multiplies by
// 2^14 together with the group scale.
__device__ __forceinline__ void fp4x8_to_f(uint32_t q, float v[8]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t b = (q >> (8 * j)) & 0xffu;
        const uint32_t x = (b | (b << 12)) & 0x000f000fu;
        const uint32_t h = ((x & 0x00070007u) << 9) | ((x & 0x00080008u) << 12);
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
        v[2 * j] = f.x;
        v[2 * j + 1] = f.y;
    }
}

// Four fp8 e4m3 values (one word, byte j = element j) as f32, exact (e4m3 -> f16 -> f32).
__device__ __forceinline__ void fp8x4_to_f(uint32_t q, float v[4]) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(q & 0xffffu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(q >> 16), __NV_E4M3);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}

// Unscaled dot of one 16-byte unit `q` with each token's staged x of that unit (xs[t]: kElems floats).
template <int F, int NT>
__device__ __forceinline__ void unit_dot(uint4 q, const float* const xs[NT], int nt, float part[NT]) {
    constexpr int k = 0;
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int t = 0; t < NT; ++t) part[t] = 0.0f;
    if constexpr (F == kF32) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t >= nt) break;
            const float4 a = *reinterpret_cast<const float4*>(xs[t]);
            float s = 0.0f;
            s = fmaf(__uint_as_float(w[0]), a.x, s);
            s = fmaf(__uint_as_float(w[1]), a.y, s);
            s = fmaf(__uint_as_float(w[2]), a.z, s);
            s = fmaf(__uint_as_float(w[3]), a.w, s);
            part[t] = s;
        }
    } else if constexpr (F == kBF16 || F == kF16) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if constexpr (F == kBF16) {
                v[2 * j] = __uint_as_float(w[j] << 16);
                v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
            } else {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
                v[2 * j] = f.x, v[2 * j + 1] = f.y;
            }
        }
        fma8<NT>(v, xs, nt, k, part);
    } else if constexpr (F == kFp8) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float v[8];
            fp8x4_to_f(w[2 * h], v);
            fp8x4_to_f(w[2 * h + 1], v + 4);
            fma8<NT>(v, xs, nt, k + 8 * h, part);
        }
    } else {
#pragma unroll
        for (int h = 0; h < 4; ++h) {
            float v[8];
            fp4x8_to_f(w[h], v);
            fma8<NT>(v, xs, nt, k + 8 * h, part);
        }
    }
}

// Scale of the unit at (row o, element k): 1 for dense; fp4 folds in the 2^14 of fp4x8_to_f.
template <int F>
__device__ __forceinline__ float unit_scale(const WeightRef& w, int64_t o, int64_t k) {
    if constexpr (F == kFp8) return weight_scale(w, o >> 7, k >> 7);
    if constexpr (F == kFp4) return weight_scale(w, o, k >> 5) * 16384.0f;
    return 1.0f;
}

// Row stride of w in bytes (WeightRef::ld counts elements for dense and fp8, bytes for fp4).
__host__ __device__ __forceinline__ int64_t row_bytes(const WeightRef& w, int f) {
    return f == kF32 ? w.ld * 4 : (f == kBF16 || f == kF16) ? w.ld * 2 : w.ld;
}

template <int F>
__device__ __forceinline__ uint4 load_unit(const WeightRef& w, int64_t o, int64_t unit) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + o * row_bytes(w, F);
    return __ldg(reinterpret_cast<const uint4*>(row) + unit);
}

// Shared-memory floats one token's staged x takes: a padded row of E + 4 per unit.
template <int F>
__host__ __device__ constexpr int64_t staged_floats(int64_t in_dim) {
    return in_dim / UnitOf<F>::kElems * (UnitOf<F>::kElems + 4);
}

// Stages token rows xg[0 .. nt) (in_dim floats each, 16-byte aligned) into xsm, token t at t * stride.
// Four float4 loads per thread are issued before their stores (one memory latency per 4 KiB of a row,
// not four). The whole block takes part; the caller synchronises before use.
template <int F, int NT>
__device__ __forceinline__ void stage_x(const float* const xg[NT], int nt, int64_t in_dim, float* xsm) {
    constexpr int E = UnitOf<F>::kElems, kBatch = 4;
    const int64_t stride = staged_floats<F>(in_dim), step = int64_t(blockDim.x) * 4;
#pragma unroll
    for (int t = 0; t < NT; ++t) {  // unrolled: xg stays in registers
        if (t >= nt) break;
        for (int64_t i0 = int64_t(threadIdx.x) * 4; i0 < in_dim; i0 += kBatch * step) {
            float4 v[kBatch];
#pragma unroll
            for (int b = 0; b < kBatch; ++b)
                if (i0 + b * step < in_dim) v[b] = ldg4(xg[t] + i0 + b * step);
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int64_t i = i0 + b * step;
                if (i < in_dim)
                    *reinterpret_cast<float4*>(xsm + t * stride + (i / E) * (E + 4) + i % E) = v[b];
            }
        }
    }
}

// The staged token rows quantised as the native precision's activations (act_quant.cu: each 128-element
// block to e4m3 under its power-of-two scale and back, the same expressions, so the bits of the quantiser's
// copy): a warp a block, lane l its elements 4l .. 4l + 3 (one float4: units hold a multiple of 4 elements).
// in_dim a multiple of 128; the whole block takes part; the caller synchronises before and after.
template <int F, int NT>
__device__ __forceinline__ void quantise_staged(float* xsm, int nt, int64_t in_dim) {
    constexpr int E = UnitOf<F>::kElems;
    const int64_t stride = staged_floats<F>(in_dim), blocks = in_dim / 128;
    const int warp = int(threadIdx.x >> 5), warps = int(blockDim.x >> 5), lane = int(threadIdx.x & 31);
    for (int64_t wb = warp; wb < nt * blocks; wb += warps) {
        const int64_t i = (wb % blocks) * 128 + 4 * lane;
        float4* at = reinterpret_cast<float4*>(xsm + (wb / blocks) * stride + (i / E) * (E + 4) + i % E);
        float4 v = *at;
        float m = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float s = act_quant_scale(m);
        v.x = act_quant_round_trip(v.x, s), v.y = act_quant_round_trip(v.y, s);
        v.z = act_quant_round_trip(v.z, s), v.w = act_quant_round_trip(v.w, s);
        *at = v;
    }
}

// A warp's dots of rows o0 .. o0+R (rows >= out_dim skipped) of M matrices of the same shape (the MoE's
// W1 and W3 share one pass) with NT staged token rows (xrow[t]: token t's staged row, padded as
// staged_floats): lane l takes the units l, l + 32, ... of every row, U at a time with all M * U * R
// loads issued before the first use, then the lanes' partials are summed by a fixed butterfly. Every
// lane returns the totals in acc. A token's sums do not depend on NT, U or the other tokens.
template <int F, int NT, int R, int U, int M = 1>
__device__ __forceinline__ void warp_rows_m(const WeightRef (&w)[M], int64_t o0,
                                            const float* const (&xrow)[NT], int nt, float acc[M][R][NT]) {
    constexpr int E = UnitOf<F>::kElems;
    const int lane = threadIdx.x & 31;
    const int64_t units = w[0].in_dim / E, out_dim = w[0].out_dim;
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[m][r][t] = 0.0f;
    for (int64_t u0 = lane; u0 < units; u0 += 32 * U) {
        uint4 q[M][U][R];
        float sc[M][U][R];
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
            for (int j = 0; j < U; ++j)
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int64_t u = u0 + 32 * j;
                    const bool ok = u < units && o0 + r < out_dim;
                    q[m][j][r] = ok ? load_unit<F>(w[m], o0 + r, u) : make_uint4(0, 0, 0, 0);
                    sc[m][j][r] = ok ? unit_scale<F>(w[m], o0 + r, u * E) : 0.0f;
                }
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const int64_t u = u0 + 32 * j;
            if (u >= units) break;
            const float* xs[NT];
#pragma unroll
            for (int t = 0; t < NT; ++t) xs[t] = xrow[min(t, nt - 1)] + u * (E + 4);
#pragma unroll
            for (int m = 0; m < M; ++m)
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    float part[NT];
                    unit_dot<F, NT>(q[m][j][r], xs, nt, part);
#pragma unroll
                    for (int t = 0; t < NT; ++t) acc[m][r][t] = fmaf(sc[m][j][r], part[t], acc[m][r][t]);
                }
        }
    }
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[m][r][t] = warp_sum(acc[m][r][t]);
}

// The same with token t staged at xsm + t * staged_floats(in_dim).
template <int F, int NT, int R, int U, int M = 1>
__device__ __forceinline__ void warp_rows_m(const WeightRef (&w)[M], int64_t o0, const float* xsm, int nt,
                                            float acc[M][R][NT]) {
    const float* xrow[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) xrow[t] = xsm + t * staged_floats<F>(w[0].in_dim);
    warp_rows_m<F, NT, R, U, M>(w, o0, xrow, nt, acc);
}

// One matrix.
template <int F, int NT, int R, int U>
__device__ __forceinline__ void warp_rows(const WeightRef& w, int64_t o0, const float* xsm, int nt,
                                          float acc[R][NT]) {
    const WeightRef ws[1] = {w};
    warp_rows_m<F, NT, R, U, 1>(ws, o0, xsm, nt, reinterpret_cast<float(*)[R][NT]>(acc));
}

// Blocks of 256 threads resident per multiprocessor for `kernel` with `smem` bytes of dynamic shared
// memory on the current device (cached per device; raises the kernel's shared-memory limit there to
// kGemvMaxSmem on first use: smem_limit.h).
template <class K>
int resident_blocks(K kernel, size_t smem) {
    int dev = 0;
    DI_CUDA_CHECK(cudaGetDevice(&dev));
    static std::mutex mu;
    static std::map<std::tuple<const void*, size_t, int>, int> cache;
    std::lock_guard lk(mu);
    const auto key = std::tuple{reinterpret_cast<const void*>(kernel), smem, dev};
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    raise_dynamic_smem(kernel, kGemvMaxSmem);
    int n = 0;
    DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 256, smem));
    return cache[key] = std::max(n, 1);
}

}  // namespace di::cuda::gemv
