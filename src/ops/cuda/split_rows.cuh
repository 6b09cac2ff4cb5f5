// Weight rows split across the threads of a block, each token's slice of x held in registers: the decode
// GEMV and the MoE experts at one or two tokens per matrix. Thread c of a row group owns elements
// [32c, 32c + 32) of every row it visits: it loads those 32 x values per token once, then streams its 16
// (fp4), 32 (fp8) or 64 (bf16) bytes of each row. Reading x from shared memory instead would cost, for an
// fp4 weight byte, 8 bytes of shared-memory traffic: as much time as the weight stream itself.
// A row's partials are added across the group by a fixed tree (a warp butterfly, then the group's warps in
// order), so every (row, token) result is the same whatever else shares the pass: batch-invariant and
// deterministic. Rows are visited B at a time, all of their loads issued before the first use.
#pragma once

#include "ops/cuda/gemv.cuh"

namespace di::cuda::split {

using namespace gemv;

constexpr int kChunk = 32;  // elements of a row per thread

// 16-byte loads per thread per row.
template <int F>
constexpr int kLoads = F == kFp4   ? 1
                       : F == kFp8 ? 2
                       : F == kF32 ? 8
                                   : 4;

// Rows per batch for M matrices and NT tokens: about 4 loads in flight per thread and as many prefetched
// (rows_pass), fewer with two tokens (their x slices take the registers); M * B * NT stays a power of two
// (warp_multi_sum).
template <int F, int M, int NT>
constexpr int kBatch = (4 / NT) / (kLoads<F> * M) >= 1 ? (4 / NT) / (kLoads<F> * M) : 1;

// A row of in_dim elements is in_dim / 32 threads: whole warps that tile a 256-thread block (in_dim 1024,
// 2048, 4096 or 8192).
__host__ __device__ constexpr bool in_dim_ok(int64_t in) {
    return in == 1024 || in == 2048 || in == 4096 || in == 8192;
}

template <int NT>
__device__ __forceinline__ void load_x(const float* const (&x)[NT], int c, float (&xr)[NT][kChunk]) {
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int j = 0; j < kChunk / 4; ++j) {
            const float4 v = ldg4(x[t] + c * kChunk + 4 * j);
            xr[t][4 * j] = v.x, xr[t][4 * j + 1] = v.y, xr[t][4 * j + 2] = v.z, xr[t][4 * j + 3] = v.w;
        }
}

// The native precision's FP8 activations (ops/act_quant.h) of the x slices in registers: each 128-element
// block (the chunks of four adjacent lanes) quantised to e4m3 under its power-of-two scale and back, the
// expressions of act_quant_dequant (act_quant.cu), so the bits are those of its copy without its launch.
// Every lane of the warp takes part (its shuffles).
template <int NT>
__device__ __forceinline__ void quant_dequant_x(float (&xr)[NT][kChunk]) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < kChunk; ++i) amax = fmaxf(amax, fabsf(xr[t][i]));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        const float s = act_quant_scale(amax);
#pragma unroll
        for (int i = 0; i < kChunk; ++i) xr[t][i] = act_quant_round_trip(xr[t][i], s);
    }
}

// part[t] = unscaled dot of the thread's chunk of one row (q) with token t's x slice, in element order
// within each word (fp4: the pairs i, i + 4 of each 8-element word).
template <int F, int NT>
__device__ __forceinline__ void chunk_dot(const uint4 (&q)[kLoads<F>], const float (&xr)[NT][kChunk],
                                          float (&part)[NT]) {
    uint32_t w[4 * kLoads<F>];
#pragma unroll
    for (int l = 0; l < kLoads<F>; ++l)
        w[4 * l] = q[l].x, w[4 * l + 1] = q[l].y, w[4 * l + 2] = q[l].z, w[4 * l + 3] = q[l].w;
#pragma unroll
    for (int t = 0; t < NT; ++t) part[t] = 0.0f;
    if constexpr (F == kFp4) {
        // Nibbles i and i + 4 of a word become one f16 pair (value * 2^-14, exact: gemv.cuh), in 4 integer
        // ops.
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint32_t m = i < 3 ? w[j] << (9 - 4 * i) : w[j] >> 3;
                const uint32_t s = w[j] << (12 - 4 * i);
                const uint32_t h = (m & 0x0E000E00u) | (s & 0x80008000u);
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    part[t] = fmaf(f.x, xr[t][8 * j + i], part[t]);
                    part[t] = fmaf(f.y, xr[t][8 * j + i + 4], part[t]);
                }
            }
    } else if constexpr (F == kFp8) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            float v[4];
            fp8x4_to_f(w[j], v);
#pragma unroll
            for (int t = 0; t < NT; ++t)
#pragma unroll
                for (int e = 0; e < 4; ++e) part[t] = fmaf(v[e], xr[t][4 * j + e], part[t]);
        }
    } else if constexpr (F == kBF16 || F == kF16) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            float a, b;
            if constexpr (F == kBF16) {
                a = __uint_as_float(w[j] << 16), b = __uint_as_float(w[j] & 0xffff0000u);
            } else {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
                a = f.x, b = f.y;
            }
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                part[t] = fmaf(a, xr[t][2 * j], part[t]);
                part[t] = fmaf(b, xr[t][2 * j + 1], part[t]);
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < 32; ++j)
#pragma unroll
            for (int t = 0; t < NT; ++t) part[t] = fmaf(__uint_as_float(w[j]), xr[t][j], part[t]);
    }
}

// V values per lane (a power of two <= 32) summed over the warp: afterwards lane l holds in v[0] the total
// of value l >> (5 - log2 V). Each value's sum is the same butterfly whatever V is (a + b == b + a).
template <int V>
__device__ __forceinline__ void warp_multi_sum(float (&v)[V], int lane) {
    static_assert(V >= 1 && V <= 32 && (V & (V - 1)) == 0, "V must be a power of two <= 32");
    int o = 16;
#pragma unroll
    for (int h = V / 2; h >= 1; h /= 2, o /= 2) {
        const bool up = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < h; ++i) {
            const float send = up ? v[i] : v[i + h], keep = up ? v[i + h] : v[i];
            v[i] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, o));
        }
    }
#pragma unroll
    for (; o >= 1; o /= 2) v[0] = __fadd_rn(v[0], __shfl_xor_sync(0xffffffffu, v[0], o));
}

template <int V>
__host__ __device__ constexpr int log2_of() {
    return V <= 1 ? 0 : 1 + log2_of<V / 2>();
}

// Where a row group sits in its block: threads per row (in_dim / 32), the thread's chunk, its warp within
// the group and the group's number.
struct Group {
    int tpr, c, wig, warps, g, groups;
    __device__ explicit Group(int64_t in_dim) {
        tpr = int(in_dim / kChunk);
        c = int(threadIdx.x) % tpr;
        wig = c / 32;
        warps = tpr / 32;
        g = int(threadIdx.x) / tpr;
        groups = int(blockDim.x) / tpr;
    }
};

// One batch of B rows of M matrices: the thread's 16-byte units and their scales.
template <int F, int M, int B>
struct Batch {
    uint4 q[M][B][kLoads<F>];
    float sc[M][B];
};

template <int F, int M, int B>
__device__ __forceinline__ void load_batch(Batch<F, M, B>& bt, const WeightRef (&w)[M], int64_t r0,
                                           int64_t rend, int c) {
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int b = 0; b < B; ++b) {
            const int64_t row = r0 + b;
            const bool ok = row < rend;
            const uint4* src = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w[m].data) +
                                                              (ok ? row : 0) * row_bytes(w[m], F)) +
                               c * kLoads<F>;
#pragma unroll
            for (int l = 0; l < kLoads<F>; ++l) bt.q[m][b][l] = ok ? __ldg(src + l) : make_uint4(0, 0, 0, 0);
            bt.sc[m][b] = ok ? unit_scale<F>(w[m], row, int64_t(c) * kChunk) : 0.0f;
        }
}

// Partials of rows [rbeg, rend) of M same-shaped matrices against NT tokens' x slices: the warp totals go
// to red[((m * rpc + (row - base)) * NT + t) * warps + wig] (the group's warps are added by the caller,
// in order). The next batch's loads are issued before the current one is computed. Rows beyond rend are
// not loaded. `first` runs once the first batch's loads are issued, before any use of xr (the decode GEMV
// waits there for the previous kernel and loads x: early_launch.cuh).
template <int F, int NT, int M, int B, typename First>
__device__ __forceinline__ void rows_pass(const WeightRef (&w)[M], int64_t rbeg, int64_t rend, int64_t base,
                                          int rpc, float (&xr)[NT][kChunk], const Group& gr, float* red,
                                          First&& first) {
    constexpr int V = M * B * NT, kLog = log2_of<V>();
    const int lane = threadIdx.x & 31;
    Batch<F, M, B> cur, next;
    if (rbeg < rend) load_batch<F, M, B>(cur, w, rbeg, rend, gr.c);
    first();
    for (int64_t r0 = rbeg; r0 < rend; r0 += B) {
        if (r0 + B < rend) load_batch<F, M, B>(next, w, r0 + B, rend, gr.c);
        float v[V];
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
            for (int b = 0; b < B; ++b) {
                float part[NT];
                chunk_dot<F, NT>(cur.q[m][b], xr, part);
#pragma unroll
                for (int t = 0; t < NT; ++t) v[(m * B + b) * NT + t] = __fmul_rn(part[t], cur.sc[m][b]);
            }
        warp_multi_sum<V>(v, lane);
        if ((lane & ((32 >> kLog) - 1)) == 0) {
            const int idx = lane >> (5 - kLog);
            const int m = idx / (B * NT), b = (idx / NT) % B, t = idx % NT;
            const int64_t row = r0 + b;
            if (row < rend) red[((int64_t(m) * rpc + (row - base)) * NT + t) * gr.warps + gr.wig] = v[0];
        }
        cur = next;
    }
}

template <int F, int NT, int M, int B>
__device__ __forceinline__ void rows_pass(const WeightRef (&w)[M], int64_t rbeg, int64_t rend, int64_t base,
                                          int rpc, float (&xr)[NT][kChunk], const Group& gr, float* red) {
    rows_pass<F, NT, M, B>(w, rbeg, rend, base, rpc, xr, gr, red, [] {});
}

// The total of (m, local row lr, token t): the group's warps in order.
template <int NT>
__device__ __forceinline__ float group_total(const float* red, int m, int64_t lr, int t, int rpc, int warps) {
    const float* p = red + ((int64_t(m) * rpc + lr) * NT + t) * warps;
    float s = p[0];
    for (int i = 1; i < warps; ++i) s = __fadd_rn(s, p[i]);
    return s;
}

// Rows per block: a multiple of groups * B, about one resident wave (2 blocks per multiprocessor) over
// `row_work` rows in all.
inline int rows_per_block(int64_t row_work, int64_t in_dim, int b, int64_t rows_of_one) {
    const int64_t groups = 256 / (in_dim / kChunk), gran = groups * b;
    const int64_t want = (row_work + 2 * sm_count() - 1) / (2 * sm_count());
    const int64_t r = std::max(gran, (want + gran - 1) / gran * gran);
    return int(std::min(r, (rows_of_one + gran - 1) / gran * gran));
}

}  // namespace di::cuda::split
