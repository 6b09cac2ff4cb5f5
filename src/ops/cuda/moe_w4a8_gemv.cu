// Routed experts of a decode step as W4A8 on mma.sync's FP8 tensor cores (native precision; fp4 experts whose
// group scales fold into e4m3: MoeParams::e4m3_ok). Each (token, slot) pair on its own, in two launches:
//   up:    h[pair, r] = swiglu(W1_e[r] . xq_t, W3_e[r] . xq_t); block (16 rows of W1 and of W3, pair)
//   down:  out[t, c] = sum_j w[t, j] (W2_e[c] . hq[t k + j]), the slots in order, summed in double (the
//          combine of every variant: launch_moe_combine); block (16 rows of W2, token)
// A block's 8 warps share its rows' K (up: four warps a matrix, chunks w, w + 4, ..; down: chunks w, w + 8,
// .. of each slot in turn), kAhead chunks' loads in flight a warp (each refilled once multiplied). The block
// first quantises the x or h rows it reads into shared memory as the activation quantiser does (e4m3 with a
// power-of-two scale per 128 elements; while the first loads are in flight), from where each chunk goes to
// B column 0 (the token; columns 1-7 zero). The weights become A fragments as w4a8 makes them (moe_w4a8.cuh:
// fp4 -> e4m3 through the per-group table, the group's scale folded in relative to the chunk's largest); a
// chunk's four k-steps sum in fresh registers, then join the f32 sums times the row's factor and the token's
// scale (promoted every 128, as the prefill's w4a8). The warps' partial sums meet in shared memory in warp
// order. The weights are read once a pair: for one token, each selected expert once. A token's bits depend on
// its own pairs only: deterministic and batch-invariant.
#include <algorithm>
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

// A block's activation chunks quantised once, as the activation quantiser does (e4m3 with a power-of-two
// scale per 128 elements), in shared memory: [chunks][32] words (lane l's word: elements 4 l .. 4 l + 3 in
// w4a8::w8_index order) then [chunks] scales. Warp w takes chunks w, w + 8, ..; the caller synchronises.
__device__ __forceinline__ void stage_chunks(const float* src, int64_t ld, int chunks_a_row, int chunks,
                                             uint32_t* words, float* scales, int warp, int lane) {
    for (int c = warp; c < chunks; c += kWarps) {
        const float* row = src + (c / chunks_a_row) * ld + int64_t(c % chunks_a_row) * kChunk;
        const auto [word, s] = w4a8::quantise_lane_word(*reinterpret_cast<const float4*>(row + 4 * lane));
        words[c * 32 + lane] = word;
        if (lane == 0) scales[c] = s;
    }
}

constexpr size_t staged_bytes(int64_t chunks) { return size_t(chunks) * (32 + 1) * sizeof(uint32_t); }

// Staged chunk c as B column 0's registers for the four k-steps: thread q's register 0 of k-step i holds lane
// 8q + 2i's word, register 1 lane 8q + 2i + 1's (lanes of the other columns get zeros).
struct TokenChunk {
    uint32_t b0[4], b1[4];
    float scale;
};

__device__ __forceinline__ void staged_chunk(const uint32_t* words, const float* scales, int c, int lane,
                                             TokenChunk& t) {
    uint4 a = make_uint4(0, 0, 0, 0), b = a;
    if (lane < 4) {
        a = *reinterpret_cast<const uint4*>(words + c * 32 + 8 * lane);
        b = *reinterpret_cast<const uint4*>(words + c * 32 + 8 * lane + 4);
    }
    t.b0[0] = a.x, t.b1[0] = a.y, t.b0[1] = a.z, t.b1[1] = a.w;
    t.b0[2] = b.x, t.b1[2] = b.y, t.b0[3] = b.z, t.b1[3] = b.w;
    t.scale = scales[c];
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

// grid (I / 16, pairs), kThreads, staged_bytes(D / 128). h [pairs, I]. Warps 0-3 take W1's rows, 4-7 W3's,
// each a quarter of K; a warp keeps kAhead chunks' loads in flight (the next load into a chunk's registers as
// soon as they are multiplied).
template <int kAhead>
__global__ void __launch_bounds__(kThreads, 2) moe_w4a8_gemv_up_kernel(MoeParams p, float* h) {
    allow_early_next();
    wait_prior();  // ids and x come from earlier kernels
    const int64_t pair = blockIdx.y;
    const int e = moe_expert_of(p, pair);
    if (e < 0) return;
    constexpr int kQuarter = kWarps / 2, kStep = kQuarter * kAhead;
    extern __shared__ uint32_t xq[];
    __shared__ float part[2][kQuarter][kRows];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int m = warp / kQuarter, wq = warp % kQuarter;
    const int chunks = int(p.D / kChunk);
    float* xs = reinterpret_cast<float*>(xq + chunks * 32);
    const WeightRef& w = p.table[3 * e + m];
    const int64_t row0 = int64_t(blockIdx.x) * kRows + g, ld = w.ld, ld_sc = w.ld_scale;  // read once
    const uint8_t* wp = static_cast<const uint8_t*>(w.data) + row0 * ld;
    const uint8_t* sp = static_cast<const uint8_t*>(w.scale) + row0 * ld_sc;
    Rows r[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u)
        if (wq + u * kQuarter < chunks) load_rows(wp, sp, ld, ld_sc, wq + u * kQuarter, q, r[u]);
    stage_chunks(p.x + (pair / p.k) * p.ld_x, 0, chunks, chunks, xq, xs, warp, lane);
    __syncthreads();
    float acc[2] = {0.0f, 0.0f};
    for (int c0 = wq; c0 < chunks; c0 += kStep) {
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {
            const int c = c0 + u * kQuarter;
            if (c < chunks) {
                TokenChunk t;
                staged_chunk(xq, xs, c, lane, t);
                chunk_product(r[u], q, t, acc);
                if (c + kStep < chunks) load_rows(wp, sp, ld, ld_sc, c + kStep, q, r[u]);
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

// grid (D / 16, n), kThreads, staged_bytes(k I / 128). h [pairs, I]; y_out (MoeParams): the slots' rows
// instead of the combine. A warp's items are (slot j, its i-th chunk of this warp) as j * mine + i, kAhead
// in flight as in the up kernel.
template <int kAhead>
__global__ void __launch_bounds__(kThreads, 2) moe_w4a8_gemv_down_kernel(MoeParams p, const float* h) {
    allow_early_next();
    wait_prior();  // h from the up launch
    extern __shared__ uint32_t hq[];
    __shared__ float part[kMaxSlots][kWarps][kRows];
    __shared__ int expert[kMaxSlots];
    const int64_t t = blockIdx.y, tile0 = int64_t(blockIdx.x) * kRows;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int chunks = int(p.I / kChunk), k = int(p.k);
    float* hs = reinterpret_cast<float*>(hq + k * chunks * 32);
    for (int i = threadIdx.x; i < k * kWarps * kRows; i += kThreads) (&part[0][0][0])[i] = 0.0f;
    if (threadIdx.x < k) expert[threadIdx.x] = moe_expert_of(p, t * k + threadIdx.x);
    __syncthreads();
    const int mine = warp < chunks ? (chunks - warp + kWarps - 1) / kWarps : 0;  // chunks a slot
    const int items = mine * k;
    auto load_item = [&](int it, Rows& r) {
        const int e = expert[it / mine];
        if (e < 0) return;
        const WeightRef& w2 = p.table[3 * e + 2];
        load_rows(static_cast<const uint8_t*>(w2.data) + (tile0 + g) * w2.ld,
                  static_cast<const uint8_t*>(w2.scale) + (tile0 + g) * w2.ld_scale, w2.ld, w2.ld_scale,
                  warp + (it % mine) * kWarps, q, r);
    };
    Rows r[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u)
        if (u < items) load_item(u, r[u]);
    // slots without an expert are staged too (their h rows hold whatever was there: never multiplied)
    stage_chunks(h + t * k * p.I, p.I, chunks, k * chunks, hq, hs, warp, lane);
    __syncthreads();
    float acc[2] = {0.0f, 0.0f};
    for (int i0 = 0; i0 < items; i0 += kAhead) {
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {
            const int it = i0 + u;
            if (it < items) {
                const int j = it / mine, c = j * chunks + warp + (it % mine) * kWarps;
                if (expert[j] >= 0) {
                    TokenChunk tc;
                    staged_chunk(hq, hs, c, lane, tc);
                    chunk_product(r[u], q, tc, acc);
                }
                if (it + kAhead < items) load_item(it + kAhead, r[u]);
                if (it % mine == mine - 1) {  // the slot's last chunk of this warp
                    if (q == 0) part[j][warp][g] = acc[0], part[j][warp][g + 8] = acc[1];
                    acc[0] = acc[1] = 0.0f;
                }
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

constexpr int kChunksAhead =
    4;  // eight measured slower (H100, 2026-12-05: 73.5 against 66.4 us at one token)

}  // namespace

bool moe_w4a8_gemv_supported(const MoeParams& p, bool forced) {
    // off until its cases pass on a GPU: DEEPINFER_MOE_W4A8_GEMV=1 gives it one token (A/B timing)
    static const bool by_default = env_switch("DEEPINFER_MOE_W4A8_GEMV", false);
    return (forced || by_default) && p.act_fp8 && p.e4m3_ok && p.scales_4b && p.gemv_format == gemv::kFp4 &&
           p.D % kChunk == 0 && p.I % kChunk == 0 && p.ld_x % 4 == 0 &&
           reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.k <= kMaxSlots && p.n * p.k <= 65535 &&
           staged_bytes(std::max(p.D, p.k * p.I) / kChunk) <= 48 * 1024 && (forced || p.n == 1);
}

void launch_moe_w4a8_gemv(const MoeParams& p, Scratch& scratch, Stream s) {
    float* h = static_cast<float*>(scratch.get(1, size_t(p.n * p.k * p.I) * sizeof(float)));
    launch_early(moe_w4a8_gemv_up_kernel<kChunksAhead>, dim3(unsigned(p.I / kRows), unsigned(p.n * p.k)),
                 dim3(kThreads), staged_bytes(p.D / kChunk), as_stream(s), p, h);
    launch_early(moe_w4a8_gemv_down_kernel<kChunksAhead>, dim3(unsigned(p.D / kRows), unsigned(p.n)),
                 dim3(kThreads), staged_bytes(p.k * p.I / kChunk), as_stream(s), p,
                 static_cast<const float*>(h));
}

}  // namespace di::cuda
