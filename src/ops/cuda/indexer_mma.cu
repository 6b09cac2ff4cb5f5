// The indexer's scores of the native precision on the tensor cores (variant `mma`): 64 heads x 128 dims.
//   key rows:  a first launch turns each compressed index key into f16 with its own power-of-two scale (max
//              |x| into [2^14, 2^15)).
//   block:     4 queries, 16 warps; warp w takes query w / 4 and heads 16 (w % 4) .. + 15, q as f16 A
//              fragments in registers with one scale per warp, made once; the block walks the entries 64 at a
//              time, each tile's key rows copied by cp.async into shared memory (two buffers: the next tile's
//              copies run while this one's products do); q . k on mma.sync m16n8k16 (f32 sums), then per
//              entry the warp's sum over its heads of w_h relu(q_h . k) (a fixed shuffle tree), the four
//              warps of a query added in warp order, each key's and each warp's scale applied exactly (powers
//              of two commute with relu). Tiles past every query's visible entries are written -inf without
//              products (half the work of a prefill from position 0). A block of 2 queries and one tile
//              re-read its queries' q (32 KB a query) for every tile: 67 GB at a 32K prompt.
// Precision: q and keys rounded to f16 (2^-11 relative each) before exact products; the top-k then runs on
// these scores (topk_kernel, indexer.cu). Deterministic; a query's scores do not depend on the others (each
// query's products and sums are those of a block of its own).
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {
namespace {

using namespace mma;

constexpr int kH = 64, kDim = 128, kEntries = 64, kQueries = 4, kThreads = 128 * kQueries;
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

// grid ceil(L / kQueries), kThreads threads: S[t, e] for the block's queries and every entry.
__global__ void __launch_bounds__(kThreads)
    score_mma_kernel(IndexerParams p, const __half* k16, const int* kshift, float* S) {
    allow_early_next();
    __shared__ __align__(16) __half kt[2][kEntries * kRow];
    __shared__ float part[kQueries][4][kEntries];
    const int64_t t0 = int64_t(blockIdx.x) * kQueries;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int qi = warp >> 2, hg = warp & 3;
    const int64_t t = t0 + qi, t_last = min(t0 + kQueries, p.L) - 1;
    // tiles with an entry visible to a query of the block (visible grows with t); the rest -inf
    const int64_t tiles = (min(visible(p, t_last), p.T) + kEntries - 1) / kEntries;
    for (int64_t i = tid; i < kQueries * (p.T - tiles * kEntries); i += kThreads) {
        const int64_t n = p.T - tiles * kEntries, tt = t0 + i / n, e = tiles * kEntries + i % n;
        if (tt < p.L) S[tt * p.T + e] = -INFINITY;
    }
    if (tiles == 0) return;
    // a tile's 64 key rows: 16 units of 16 bytes each, 2 a thread (zeros past T)
    auto issue = [&](int64_t tile) {
        __half* dst = kt[tile & 1];
#pragma unroll
        for (int i = 0; i < kEntries * 16 / kThreads; ++i) {
            const int u = tid + kThreads * i, row = u >> 4, unit = u & 15;
            const int64_t e = tile * kEntries + row;
            const bool valid = e < p.T;
            wg::cp_async16(wg::smem_addr(dst + row * kRow + unit * 8),
                           valid ? k16 + e * kDim + unit * 8 : k16, valid);
        }
        wg::cp_async_commit();
    };
    issue(0);
    // q's A fragments: k-step kk, register v = heads g (+8 for odd v), dims 16 kk + 2q (+8 for v >= 2)
    uint32_t qa[8][4];
    int shq = 0;
    float w0 = 0.0f, w1 = 0.0f;
    if (t < p.L) {
        float2 qv[8][4];
        float qmax = 0.0f;
        const float* qb = p.q + t * p.q_s0 + (16 * hg) * p.q_s1;
#pragma unroll
        for (int kk = 0; kk < 8; ++kk)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                qv[kk][v] = *reinterpret_cast<const float2*>(qb + (g + (v & 1) * 8) * p.q_s1 + 16 * kk +
                                                             2 * q + (v >> 1) * 8);
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
        w0 = p.w[t * p.ld_w + 16 * hg + g], w1 = p.w[t * p.ld_w + 16 * hg + g + 8];
    }
    const float warp_scale = pow2f(-shq);
    for (int64_t tile = 0; tile < tiles; ++tile) {
        if (tile + 1 < tiles) issue(tile + 1);  // its buffer's last reader was tile - 1's products
        if (tile + 1 < tiles) {
            wg::cp_async_wait<1>();
        } else {
            wg::cp_async_wait<0>();
        }
        __syncthreads();  // the tile's rows landed; the last tile's sums have read part
        if (t < p.L) {
            float s[8][4];  // entries 8 nt + 2q (+1): heads g (0, 1), g + 8 (2, 3)
            // ldmatrix rows: matrix lane / 8 = dims + 8 (odd), entries + 8 (>= 2)
            mma_rows_by_smem_cols(
                s, qa, kt[tile & 1] + ((lane >> 4) * 8 + (lane & 7)) * kRow + ((lane >> 3) & 1) * 8, kRow);
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    float v = w0 * fmaxf(s[nt][c], 0.0f) + w1 * fmaxf(s[nt][2 + c], 0.0f);
#pragma unroll
                    for (int o = 4; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);  // over g
                    if (g == 0) part[qi][hg][8 * nt + 2 * q + c] = v * warp_scale;
                }
        }
        __syncthreads();  // part holds the tile's sums; its key buffer is free
        for (int i = tid; i < kQueries * kEntries; i += kThreads) {
            const int qq = i / kEntries, j = i % kEntries;
            const int64_t tt = t0 + qq, e = tile * kEntries + j;
            if (tt < p.L && e < p.T) {
                const float sum = ((part[qq][0][j] + part[qq][1][j]) + part[qq][2][j]) + part[qq][3][j];
                S[tt * p.T + e] = e < visible(p, tt)
                                      ? sum * pow2f(-kshift[e]) * (p.score_scale * p.weight_scale)
                                      : -INFINITY;
            }
        }
    }
}

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
    score_mma_kernel<<<unsigned((p.L + kQueries - 1) / kQueries), kThreads, 0, st>>>(p, k16, shift, S);
}

}  // namespace di::cuda
