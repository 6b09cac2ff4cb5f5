// Routed experts of a decode step as W4A8 on mma.sync's FP8 tensor cores (native precision; fp4 experts whose
// group scales fold into e4m3: MoeParams::e4m3_ok). Each (token, slot) pair on its own, in two launches:
//   up:    h[pair, r] = swiglu(W1_e[r] . xq_t, W3_e[r] . xq_t); block (16 rows of W1 and of W3, pair)
//   down:  out[t, c] = sum_j w[t, j] (W2_e[c] . hq[t k + j]), the slots in order, summed in double (the
//          combine of every variant: launch_moe_combine); block (16 rows of W2, token)
// A block's 8 warps share its rows' K (up: four warps a matrix, chunks w, w + 4, ..; down: chunks w, w + 8,
// .. of each slot in turn), kAhead chunks in flight a warp, and quantises the chunk of x or h it reads as the
// activation quantiser does (e4m3 with a power-of-two scale per 128 elements), the bytes going by shuffles to
// B column 0 (the token; columns 1-7 zero). The weights become A fragments as w4a8 makes them (moe_w4a8.cuh:
// fp4 -> e4m3 through the per-group table, the group's scale folded in relative to the chunk's largest); a
// chunk's four k-steps sum in fresh registers, then join the f32 sums times the row's factor and the token's
// scale (promoted every 128, as the prefill's w4a8). The warps' partial sums meet in shared memory in warp
// order. The weights are read once a pair: for one token, each selected expert once. A token's bits depend on
// its own pairs only: deterministic and batch-invariant.
#include <cstdint>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/early_launch.cuh"
#include "ops/cuda/env_switch.h"
#include "ops/cuda/gemv.cuh"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/moe_plan.cuh"
#include "ops/cuda/moe_w4a8.cuh"

namespace di::cuda {
namespace {

using mma::kChunk;
using mma::mma_e4m3;
using mma::word_of;
using w4a8::fp4x8_to_e4m3;
using w4a8::w4a8_lut;

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kRows = 16;      // weight rows a block (one mma's A)
constexpr int kMaxSlots = 16;  // k: the down block keeps each slot's partial sums

// A chunk's weights for one thread: 16 bytes (group q) of rows g and g + 8, and those rows' four group
// scales.
struct Rows {
    uint4 w[2];
    uint32_t s[2];
};

__device__ __forceinline__ void load_rows(const uint8_t* w, const uint8_t* sc, int64_t ld, int64_t ld_sc,
                                          int64_t c, int q, Rows& r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        r.w[h] = __ldcs(reinterpret_cast<const uint4*>(w + int64_t(8 * h) * ld + c * 64 + q * 16));
        r.s[h] = __ldg(reinterpret_cast<const uint32_t*>(sc + int64_t(8 * h) * ld_sc + 4 * c));
    }
}

// Chunk c of an activation row (f32) quantised as the activation quantiser does: B column 0's registers for
// the four k-steps (the bytes in w4a8::w8_index order; lanes of the other columns get zeros) and the scale.
struct TokenChunk {
    uint32_t b0[4], b1[4];
    float scale;
};

__device__ __forceinline__ void quantise_chunk(const float* row, int64_t c, int lane, TokenChunk& t) {
    const auto [word, s] =
        w4a8::quantise_lane_word(*reinterpret_cast<const float4*>(row + c * kChunk + 4 * lane));
    // k-step i, column 0: thread q's register 0 holds elements 32q + 8i .. + 3 (lane 8q + 2i's word),
    // register 1 the next four (lane 8q + 2i + 1's)
    const int q = lane & 3;
    const bool col0 = lane < 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint32_t lo = __shfl_sync(0xffffffffu, word, 8 * q + 2 * i);
        const uint32_t hi = __shfl_sync(0xffffffffu, word, 8 * q + 2 * i + 1);
        t.b0[i] = col0 ? lo : 0u;
        t.b1[i] = col0 ? hi : 0u;
    }
    t.scale = s;
}

// acc[h] (row g + 8 h, column 0: lanes 0-3) += the chunk's products, times the rows' factors and the token's
// scale.
__device__ __forceinline__ void chunk_product(const Rows& r, int q, const TokenChunk& t, float (&acc)[2]) {
    uint32_t af[4][4];
    float rf[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const uint32_t s4 = r.s[h];
        const int bmax =
            max(max(int(s4 & 0xffu), int((s4 >> 8) & 0xffu)), max(int((s4 >> 16) & 0xffu), int(s4 >> 24)));
        uint32_t lut0, lut1;
        w4a8_lut(int((s4 >> (8 * q)) & 0xffu) - bmax + 6, lut0, lut1);
        rf[h] = __int_as_float((bmax - 6) << 23);  // 2^(bmax - 127 - 6)
#pragma unroll
        for (int i = 0; i < 4; ++i) fp4x8_to_e4m3(word_of(r.w[h], i), lut0, lut1, af[i][h], af[i][2 + h]);
    }
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 4; ++i) mma_e4m3(d, af[i], t.b0[i], t.b1[i]);
    acc[0] += d[0] * (rf[0] * t.scale);
    acc[1] += d[2] * (rf[1] * t.scale);
}

// grid (I / 16, pairs), kThreads. h [pairs, I]. Warps 0-3 take W1's rows, 4-7 W3's, each a quarter of K.
// kAhead: the chunks a warp loads before it multiplies the first.
template <int kAhead>
__global__ void __launch_bounds__(kThreads, 2) moe_w4a8_gemv_up_kernel(MoeParams p, float* h) {
    allow_early_next();
    wait_prior();  // ids and x come from earlier kernels
    const int64_t pair = blockIdx.y;
    const int e = moe_expert_of(p, pair);
    if (e < 0) return;
    constexpr int kQuarter = kWarps / 2;
    __shared__ float part[2][kQuarter][kRows];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int m = warp / kQuarter, wq = warp % kQuarter;
    const int chunks = int(p.D / kChunk);
    const WeightRef& w = p.table[3 * e + m];
    const int64_t row0 = int64_t(blockIdx.x) * kRows + g;
    const uint8_t* wp = static_cast<const uint8_t*>(w.data) + row0 * w.ld;
    const uint8_t* sp = static_cast<const uint8_t*>(w.scale) + row0 * w.ld_scale;
    const float* x = p.x + (pair / p.k) * p.ld_x;
    float acc[2] = {0.0f, 0.0f};
    for (int c0 = wq; c0 < chunks; c0 += kQuarter * kAhead) {
        Rows r[kAhead];
#pragma unroll
        for (int u = 0; u < kAhead; ++u)
            if (c0 + u * kQuarter < chunks) load_rows(wp, sp, w.ld, w.ld_scale, c0 + u * kQuarter, q, r[u]);
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {
            const int c = c0 + u * kQuarter;
            if (c < chunks) {
                TokenChunk t;
                quantise_chunk(x, c, lane, t);
                chunk_product(r[u], q, t, acc);
            }
        }
    }
    if (q == 0) part[m][wq][g] = acc[0], part[m][wq][g + 8] = acc[1];
    __syncthreads();
    if (threadIdx.x < kRows) {
        float s1 = 0.0f, s3 = 0.0f;
#pragma unroll
        for (int i = 0; i < kQuarter; ++i) s1 += part[0][i][threadIdx.x], s3 += part[1][i][threadIdx.x];
        h[pair * p.I + int64_t(blockIdx.x) * kRows + threadIdx.x] = swiglu_clamped(s1, s3, p.limit);
    }
}

// grid (D / 16, n), kThreads. h [pairs, I]; y_out (MoeParams): the slots' rows instead of the combine.
template <int kAhead>
__global__ void __launch_bounds__(kThreads, 2) moe_w4a8_gemv_down_kernel(MoeParams p, const float* h) {
    allow_early_next();
    wait_prior();  // h from the up launch
    __shared__ float part[kMaxSlots][kWarps][kRows];
    __shared__ int expert[kMaxSlots];
    const int64_t t = blockIdx.y, tile0 = int64_t(blockIdx.x) * kRows;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    for (int i = threadIdx.x; i < int(p.k) * kWarps * kRows; i += kThreads) (&part[0][0][0])[i] = 0.0f;
    if (threadIdx.x < p.k) expert[threadIdx.x] = moe_expert_of(p, t * p.k + threadIdx.x);
    __syncthreads();
    const int chunks = int(p.I / kChunk);
    const int mine = warp < chunks ? (chunks - warp + kWarps - 1) / kWarps : 0;  // chunks a slot
    const int items = mine * int(p.k);  // (slot j, its i-th chunk of this warp) as j * mine + i
    float acc[2] = {0.0f, 0.0f};
    for (int i0 = 0; i0 < items; i0 += kAhead) {
        Rows r[kAhead];
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {
            const int it = i0 + u;
            const int e = it < items ? expert[it / mine] : -1;
            if (e >= 0) {
                const WeightRef& w2 = p.table[3 * e + 2];
                load_rows(static_cast<const uint8_t*>(w2.data) + (tile0 + g) * w2.ld,
                          static_cast<const uint8_t*>(w2.scale) + (tile0 + g) * w2.ld_scale, w2.ld,
                          w2.ld_scale, warp + (it % mine) * kWarps, q, r[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {
            const int it = i0 + u;
            if (it >= items) break;
            const int j = it / mine;
            if (expert[j] >= 0) {
                TokenChunk tc;
                quantise_chunk(h + (t * p.k + j) * p.I, warp + (it % mine) * kWarps, lane, tc);
                chunk_product(r[u], q, tc, acc);
            }
            if (it % mine == mine - 1) {  // the slot's last chunk of this warp
                if (q == 0) part[j][warp][g] = acc[0], part[j][warp][g + 8] = acc[1];
                acc[0] = acc[1] = 0.0f;
            }
        }
    }
    __syncthreads();
    if (threadIdx.x >= kRows) return;
    const int64_t c = tile0 + threadIdx.x;
    double out = 0;
    for (int64_t j = 0; j < p.k; ++j) {
        float y = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) y += part[j][w][threadIdx.x];
        if (p.y_out != nullptr) {
            if (expert[j] >= 0) p.y_out[(t * p.k + j) * p.D + c] = y;
        } else {
            out += double(expert[j] >= 0 ? y : 0.0f) * p.w[t * p.ld_w + j];  // combine_column's sum
        }
    }
    if (p.y_out == nullptr) p.out[t * p.ld_out + c] = float(out);
}

template <int kAhead>
void launch_ahead(const MoeParams& p, float* h, cudaStream_t st) {
    launch_early(moe_w4a8_gemv_up_kernel<kAhead>, dim3(unsigned(p.I / kRows), unsigned(p.n * p.k)),
                 dim3(kThreads), 0, st, p, h);
    launch_early(moe_w4a8_gemv_down_kernel<kAhead>, dim3(unsigned(p.D / kRows), unsigned(p.n)),
                 dim3(kThreads), 0, st, p, static_cast<const float*>(h));
}

}  // namespace

bool moe_w4a8_gemv_supported(const MoeParams& p, bool forced) {
    // off until its cases pass on a GPU: DEEPINFER_MOE_W4A8_GEMV=1 gives it one token (A/B timing)
    static const bool by_default = env_switch("DEEPINFER_MOE_W4A8_GEMV", false);
    return (forced || by_default) && p.act_fp8 && p.e4m3_ok && p.scales_4b && p.gemv_format == gemv::kFp4 &&
           p.D % kChunk == 0 && p.I % kChunk == 0 && p.ld_x % 4 == 0 &&
           reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.k <= kMaxSlots && p.n * p.k <= 65535 &&
           (forced || p.n == 1);
}

void launch_moe_w4a8_gemv(const MoeParams& p, Scratch& scratch, Stream s) {
    float* h = static_cast<float*>(scratch.get(1, size_t(p.n * p.k * p.I) * sizeof(float)));
    // DEEPINFER_MOE_W4A8_GEMV_AHEAD8=1: eight chunks in flight a warp instead of four (the same sums; until
    // measured)
    static const bool ahead8 = env_switch("DEEPINFER_MOE_W4A8_GEMV_AHEAD8", false);
    ahead8 ? launch_ahead<8>(p, h, as_stream(s)) : launch_ahead<4>(p, h, as_stream(s));
}

}  // namespace di::cuda
