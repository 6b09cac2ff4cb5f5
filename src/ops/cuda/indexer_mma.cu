// The indexer's scores of the native precision on the tensor cores (variant `mma`): 64 heads x 128 dims.
//   key rows:  a first launch turns each compressed index key into f16 with its own power-of-two scale (max
//              |x| into [2^14, 2^15)).
//   scores:    warp w of a block takes query w / 4 and heads 16 (w % 4) .. + 15, q as f16 A fragments in
//              registers with one scale per warp; 64 key rows at a time copied by cp.async into shared
//              memory; q . k on mma.sync m16n8k16 (f32 sums), then per entry the warp's sum over its heads of
//              w_h relu(q_h . k) (a fixed shuffle tree), the four warps of a query added in warp order, each
//              key's and each warp's scale applied exactly (powers of two commute with relu). Tiles past
//              every query's visible entries are written -inf without products (half the work of a prefill
//              from position 0). Two block forms with the same products and sums: a block of 2 queries and
//              one tile (the default), which makes its queries' q fragments (32 KB of q a query) for every
//              tile, 67 GB at a 32K prompt; and a block of 4 queries that walks every tile with its fragments
//              made once, the key tiles double-buffered (set_indexer_mma_walk: the default where its blocks
//              fill the GPU).
// Precision: q and keys rounded to f16 (2^-11 relative each) before exact products; the top-k then runs on
// these scores (topk_kernel, indexer.cu). Deterministic; a query's scores do not depend on the others.
#include <cstdlib>

#include "ops/cuda/env_switch.h"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {
namespace {

using namespace mma;

constexpr int kH = 64, kDim = 128, kEntries = 64;
constexpr int kRow = kDim + 8;  // halves per staged key row: ldmatrix rows 16 bytes apart in the banks

// A warp per key row: four floats a lane.
__global__ void __launch_bounds__(256)
    index_keys_f16_kernel(const float* keys, int64_t ld, int64_t T, __half* out, int* shift) {
    allow_early_next();
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
    if (row >= T) return;
    const int sh = warp_row_to_f16<1>(keys + row * ld, out + row * kDim, lane);
    if (lane == 0) shift[row] = sh;
}

__device__ __forceinline__ int64_t visible(const IndexerParams& p, int64_t t) {
    return (p.pos0 + t + 1) / p.rate;
}

// Copies 64 key rows from entry e0 into kt (16 units of 16 bytes a row, zeros past T), kThreads threads.
template <int kThreads>
__device__ __forceinline__ void issue_keys(const IndexerParams& p, const __half* k16, int64_t e0, __half* kt,
                                           int tid) {
#pragma unroll
    for (int i = 0; i < kEntries * 16 / kThreads; ++i) {
        const int u = tid + kThreads * i, row = u >> 4, unit = u & 15;
        const int64_t e = e0 + row;
        const bool valid = e < p.T;
        wg::cp_async16(wg::smem_addr(kt + row * kRow + unit * 8), valid ? k16 + e * kDim + unit * 8 : k16,
                       valid);
    }
    wg::cp_async_commit();
}

// Query t's heads 16 hg .. + 15 as A fragments (k-step kk, register v = heads g (+8 for odd v), dims 16 kk +
// 2q (+8 for v >= 2)) scaled by 2^shq into f16 range.
__device__ __forceinline__ void q_fragments(const IndexerParams& p, int64_t t, int hg, int lane,
                                            uint32_t (&qa)[8][4], int& shq) {
    const int g = lane >> 2, q = lane & 3;
    float2 qv[8][4];
    float qmax = 0.0f;
    const float* qb = p.q + t * p.q_s0 + (16 * hg) * p.q_s1;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            qv[kk][v] = *reinterpret_cast<const float2*>(qb + (g + (v & 1) * 8) * p.q_s1 + 16 * kk + 2 * q +
                                                         (v >> 1) * 8);
            qmax = fmaxf(qmax, fmaxf(fabsf(qv[kk][v].x), fabsf(qv[kk][v].y)));
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) qmax = fmaxf(qmax, __shfl_xor_sync(0xffffffffu, qmax, o));
    shq = chunk_shift(qmax);
    const float s = pow2f(shq);
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
#pragma unroll
        for (int v = 0; v < 4; ++v) qa[kk][v] = pack_f16x2(qv[kk][v].x * s, qv[kk][v].y * s);
}

// The warp's part of a tile: sum over its 16 heads of w_h relu(q_h . k) for the tile's 64 entries, times
// 2^-shq, into part[8 nt + 2q + c] by the g == 0 lanes.
__device__ __forceinline__ void tile_sums(const uint32_t (&qa)[8][4], const __half* kt, float w0, float w1,
                                          float warp_scale, int lane, float* part) {
    const int g = lane >> 2, q = lane & 3;
    float s[8][4];  // entries 8 nt + 2q (+1): heads g (0, 1), g + 8 (2, 3)
    // ldmatrix rows: matrix lane / 8 = dims + 8 (odd), entries + 8 (>= 2)
    mma_rows_by_smem_cols(s, qa, kt + ((lane >> 4) * 8 + (lane & 7)) * kRow + ((lane >> 3) & 1) * 8, kRow);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            float v = w0 * fmaxf(s[nt][c], 0.0f) + w1 * fmaxf(s[nt][2 + c], 0.0f);
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);  // over g
            if (g == 0) part[8 * nt + 2 * q + c] = v * warp_scale;
        }
}

// S[t, e] from the four warps' parts of query t, in warp order, with the key's scale; -inf past visible.
__device__ __forceinline__ void store_score(const IndexerParams& p, const int* kshift,
                                            const float (&part)[4][kEntries], int64_t t, int64_t e, int j,
                                            float* S) {
    const float sum = ((part[0][j] + part[1][j]) + part[2][j]) + part[3][j];
    S[t * p.T + e] =
        e < visible(p, t) ? sum * pow2f(-kshift[e]) * (p.score_scale * p.weight_scale) : -INFINITY;
}

// grid (ceil(T / 64), ceil(L / 2)), 256 threads: S[t, e] for the block's 2 queries and 64 entries.
__global__ void __launch_bounds__(256)
    score_mma_kernel(IndexerParams p, const __half* k16, const int* kshift, float* S) {
    constexpr int kQueries = 2, kThreads = 256;
    allow_early_next();
    __shared__ __align__(16) __half kt[kEntries * kRow];
    __shared__ float part[kQueries][4][kEntries];
    const int64_t e0 = int64_t(blockIdx.x) * kEntries, t0 = int64_t(blockIdx.y) * kQueries;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2;
    const int qi = warp >> 2, hg = warp & 3;
    const int64_t t = t0 + qi, t_last = min(t0 + kQueries, p.L) - 1;
    if (e0 >= visible(p, t_last)) {  // no entry of the tile is visible to the block's queries (visible grows
                                     // with t)
        for (int i = tid; i < kQueries * kEntries; i += kThreads) {
            const int64_t tt = t0 + i / kEntries, e = e0 + i % kEntries;
            if (tt < p.L && e < p.T) S[tt * p.T + e] = -INFINITY;
        }
        return;
    }
    issue_keys<kThreads>(p, k16, e0, kt, tid);
    uint32_t qa[8][4];
    int shq = 0;
    if (t < p.L) q_fragments(p, t, hg, lane, qa, shq);
    wg::cp_async_wait<0>();
    __syncthreads();
    if (t < p.L)
        tile_sums(qa, kt, p.w[t * p.ld_w + 16 * hg + g], p.w[t * p.ld_w + 16 * hg + g + 8], pow2f(-shq), lane,
                  part[qi][hg]);
    __syncthreads();
    if (tid < kQueries * kEntries) {
        const int qq = tid / kEntries, j = tid % kEntries;
        const int64_t tt = t0 + qq, e = e0 + j;
        if (tt < p.L && e < p.T) store_score(p, kshift, part[qq], tt, e, j, S);
    }
}

// grid ceil(L / 4), 512 threads: S[t, e] for the block's 4 queries and every entry.
__global__ void __launch_bounds__(512)
    score_mma_walk_kernel(IndexerParams p, const __half* k16, const int* kshift, float* S) {
    constexpr int kQueries = 4, kThreads = 512;
    allow_early_next();
    __shared__ __align__(16) __half kt[2][kEntries * kRow];
    __shared__ float part[kQueries][4][kEntries];
    const int64_t t0 = int64_t(blockIdx.x) * kQueries;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2;
    const int qi = warp >> 2, hg = warp & 3;
    const int64_t t = t0 + qi, t_last = min(t0 + kQueries, p.L) - 1;
    // tiles with an entry visible to a query of the block (visible grows with t); the rest -inf
    const int64_t tiles = (min(visible(p, t_last), p.T) + kEntries - 1) / kEntries,
                  rest = p.T - tiles * kEntries;
    for (int64_t i = tid; i < kQueries * rest; i += kThreads) {
        const int64_t tt = t0 + i / rest, e = tiles * kEntries + i % rest;
        if (tt < p.L) S[tt * p.T + e] = -INFINITY;
    }
    if (tiles == 0) return;
    issue_keys<kThreads>(p, k16, 0, kt[0], tid);
    uint32_t qa[8][4];
    int shq = 0;
    float w0 = 0.0f, w1 = 0.0f;
    if (t < p.L) {
        q_fragments(p, t, hg, lane, qa, shq);
        w0 = p.w[t * p.ld_w + 16 * hg + g], w1 = p.w[t * p.ld_w + 16 * hg + g + 8];
    }
    for (int64_t tile = 0; tile < tiles; ++tile) {
        if (tile + 1 < tiles) {  // its buffer's last reader was tile - 1's products
            issue_keys<kThreads>(p, k16, (tile + 1) * kEntries, kt[(tile + 1) & 1], tid);
            wg::cp_async_wait<1>();
        } else {
            wg::cp_async_wait<0>();
        }
        __syncthreads();  // the tile's rows landed; the last tile's scores have read part
        if (t < p.L) tile_sums(qa, kt[tile & 1], w0, w1, pow2f(-shq), lane, part[qi][hg]);
        __syncthreads();  // part holds the tile's sums
        for (int i = tid; i < kQueries * kEntries; i += kThreads) {
            const int qq = i / kEntries, j = i % kEntries;
            const int64_t tt = t0 + qq, e = tile * kEntries + j;
            if (tt < p.L && e < p.T) store_score(p, kshift, part[qq], tt, e, j, S);
        }
    }
}

int walk_mode = int(env_int("DEEPINFER_INDEXER_MMA_WALK", 2));

}  // namespace

bool indexer_mma_supported(const IndexerParams& p) {
    return p.f16 && p.H == kH && p.dim == kDim && p.q_s1 % 2 == 0 && p.q_s0 % 2 == 0 &&
           reinterpret_cast<uintptr_t>(p.q) % 8 == 0 && reinterpret_cast<uintptr_t>(p.keys) % 16 == 0 &&
           p.ld_keys % 4 == 0;
}

void launch_indexer_scores_mma(const IndexerParams& p, float* S, Scratch& scratch, Stream s) {
    const cudaStream_t st = as_stream(s);
    auto* k16 = static_cast<__half*>(scratch.get(13, size_t(p.T) * (kDim * sizeof(__half) + sizeof(int))));
    int* shift = reinterpret_cast<int*>(k16 + p.T * kDim);
    index_keys_f16_kernel<<<unsigned((p.T + 7) / 8), 256, 0, st>>>(p.keys, p.ld_keys, p.T, k16, shift);
    const unsigned walk_blocks = unsigned((p.L + 3) / 4);
    if (walk_mode == 1 || (walk_mode == 2 && walk_blocks >= unsigned(sm_count())))
        score_mma_walk_kernel<<<walk_blocks, 512, 0, st>>>(p, k16, shift, S);
    else
        score_mma_kernel<<<dim3(unsigned((p.T + kEntries - 1) / kEntries), unsigned((p.L + 1) / 2)), 256, 0,
                           st>>>(p, k16, shift, S);
}

void set_indexer_mma_walk(int mode) { walk_mode = mode; }

}  // namespace di::cuda
