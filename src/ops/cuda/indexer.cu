// Lightning indexer: scores S[t, w] (tiled: a register-tiled product per (query, 64 entries); warp_heads: a
// warp per entry; block: one block per (query, 64 entries), keys and q staged in shared memory), then an
// exact top-k per query: 64-bit keys (orderable score << 32 | ~w) make every key unique, so the k-th largest
// is found by an 8-pass radix select and the k winners are bitonic-sorted: best first, ties by lower entry
// id, as ops/indexer.h specifies.
#include <algorithm>
#include <vector>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/smem_limit.h"

namespace di::cuda {
namespace {

constexpr int kEntries = 64;    // entries per score block
constexpr int kMaxTopk = 4096;  // bitonic sort capacity in shared memory

// grid (ceil(T / 64), L); 256 threads = 64 entries x 4 head groups; dynamic smem: q [H][dim], keys
// [64][dim+1]
__global__ void __launch_bounds__(256) score_kernel(IndexerParams p, float* S) {
    allow_early_next();
    extern __shared__ float sm[];
    float* qs = sm;                             // [H * dim]
    float* ks = qs + p.H * p.dim;               // [64 * (dim + 1)]
    float* part = ks + kEntries * (p.dim + 1);  // [4][64]
    const int64_t t = blockIdx.y, w0 = int64_t(blockIdx.x) * kEntries;
    for (int64_t i = threadIdx.x; i < p.H * p.dim; i += blockDim.x)
        qs[i] = p.q[t * p.q_s0 + (i / p.dim) * p.q_s1 + i % p.dim];
    for (int64_t i = threadIdx.x; i < kEntries * p.dim; i += blockDim.x) {
        const int64_t r = i / p.dim, c = i % p.dim;
        ks[r * (p.dim + 1) + c] = (w0 + r < p.T) ? p.keys[(w0 + r) * p.ld_keys + c] : 0.0f;
    }
    __syncthreads();
    const int e = threadIdx.x % kEntries, hg = threadIdx.x / kEntries;
    const float* kr = ks + e * (p.dim + 1);
    float s = 0.0f;
    for (int64_t h = hg; h < p.H; h += 4) {
        const float* qh = qs + h * p.dim;
        float dot = 0.0f;
        for (int64_t c = 0; c < p.dim; ++c) dot += qh[c] * kr[c];
        s += fmaxf(dot, 0.0f) * p.score_scale * (p.w[t * p.ld_w + h] * p.weight_scale);
    }
    part[hg * kEntries + e] = s;
    __syncthreads();
    if (hg == 0 && w0 + e < p.T) {
        const int64_t w = w0 + e, visible = (p.pos0 + t + 1) / p.rate;
        const float total =
            ((part[e] + part[kEntries + e]) + part[2 * kEntries + e]) + part[3 * kEntries + e];
        S[t * p.T + w] = w < visible ? total : -INFINITY;
    }
}

constexpr int kWarpEntries = 8;             // warps per warp_heads block, each an entry at a time
constexpr int kMaxDim4 = 4;                 // float4s of a key row per lane: dim <= 4 * 4 * 32
constexpr int kWarpSmemFloats = 10 * 1024;  // the query's heads (padded to 32) x dim: 40 KB
constexpr int kWarpMaxHeads = 512;
constexpr int kWarpMaxBlocks = 264;  // two blocks per multiprocessor; warps loop over the entries

// One butterfly step over 2 * kO partial dots: the lane keeps the half whose bit kO matches its own and
// adds its partner's values of that half.
template <int kO>
__device__ __forceinline__ void halve(float (&d)[32], int lane) {
    const bool upper = (lane & kO) != 0;
#pragma unroll
    for (int i = 0; i < kO; ++i) {
        const float send = upper ? d[i] : d[i + kO], keep = upper ? d[i + kO] : d[i];
        d[i] = keep + __shfl_xor_sync(0xffffffffu, send, kO);
    }
}

// grid (min(ceil(T / 8), 264), L), 8 warps. The block stages query t's heads (zero rows up to a multiple
// of 32) and weights in shared memory; each warp then takes entries in turn. Lane l holds the key's float4s
// at columns 4 l + 128 j and forms its partial dot with each of 32 heads; a butterfly that halves the
// heads at each of 5 steps (31 shuffles for 32 heads, where a sum per head takes 160) leaves lane l the
// whole dot of head h0 + l. Lane sums of relu * score_scale * (w * weight_scale) over the 32-head groups,
// then a warp sum, give the score (padded heads add exact zeros).
__device__ __forceinline__ void score_warp(const IndexerParams& p, float* S, int64_t t) {
    __shared__ __align__(16) float qs[kWarpSmemFloats];
    __shared__ float ws[kWarpMaxHeads];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t Hp = (p.H + 31) / 32 * 32, nd4 = p.dim / 4;
    for (int64_t i = threadIdx.x; i < Hp * nd4; i += blockDim.x) {
        const int64_t h = i / nd4, c4 = i % nd4;
        reinterpret_cast<float4*>(qs)[i] =
            h < p.H ? __ldg(reinterpret_cast<const float4*>(p.q + t * p.q_s0 + h * p.q_s1) + c4)
                    : make_float4(0, 0, 0, 0);
    }
    for (int64_t h = threadIdx.x; h < Hp; h += blockDim.x)
        ws[h] = h < p.H ? p.w[t * p.ld_w + h] * p.weight_scale : 0.0f;
    __syncthreads();
    const int64_t visible = (p.pos0 + t + 1) / p.rate;
    for (int64_t w = int64_t(blockIdx.x) * kWarpEntries + warp; w < p.T;
         w += int64_t(gridDim.x) * kWarpEntries) {
        float4 k[kMaxDim4];
#pragma unroll
        for (int j = 0; j < kMaxDim4; ++j) {
            const int c4 = lane + 32 * j;
            k[j] = c4 < nd4 ? __ldg(reinterpret_cast<const float4*>(p.keys + w * p.ld_keys) + c4)
                            : make_float4(0, 0, 0, 0);
        }
        float s = 0.0f;
        for (int64_t h0 = 0; h0 < Hp; h0 += 32) {
            float d[32];
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                const float4* qh = reinterpret_cast<const float4*>(qs) + (h0 + i) * nd4;
                float dot = 0.0f;
#pragma unroll
                for (int j = 0; j < kMaxDim4; ++j) {
                    const int c4 = lane + 32 * j;
                    if (c4 < nd4) {
                        const float4 q4 = qh[c4];
                        dot += q4.x * k[j].x + q4.y * k[j].y + q4.z * k[j].z + q4.w * k[j].w;
                    }
                }
                d[i] = dot;
            }
            halve<16>(d, lane);
            halve<8>(d, lane);
            halve<4>(d, lane);
            halve<2>(d, lane);
            halve<1>(d, lane);
            s += fmaxf(d[0], 0.0f) * p.score_scale * ws[h0 + lane];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) S[t * p.T + w] = w < visible ? s : -INFINITY;
    }
}

__global__ void __launch_bounds__(kWarpEntries * 32) score_warp_kernel(IndexerParams p, float* S) {
    allow_early_next();
    score_warp(p, S, blockIdx.y);
}

constexpr int kTileEntries = 64;  // tiled: entries per block
constexpr int kTileHeads = 64;    // heads per pass over a block's entries
constexpr int kTileDims = 32;     // dims per shared-memory stage

// tiled: the block's 64 entries times 64 heads as a register-tiled product (thread (ty, tx) = threadIdx.x
// (/, %) 16 holds entries 4 ty .. 4 ty + 3 times heads 4 tx .. 4 tx + 3), keys and q staged transposed, 32
// dims at a time, in shared memory: two float4 loads feed 16 FMAs, where warp_heads loads one float4 of the
// query per 4 FMAs. Each dot is an fmaf chain in dim order; a thread's 4 heads' terms are added in head
// order, then the 16 threads of an entry (lanes of one half-warp) by a butterfly.
__device__ __forceinline__ void score_tiled(const IndexerParams& p, float* S, int64_t t, int64_t e0) {
    __shared__ __align__(16) float ks[kTileDims][kTileEntries + 4];  // [dim][entry]
    __shared__ __align__(16) float qs[kTileDims][kTileHeads + 4];    // [dim][head]
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    float score[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t h0 = 0; h0 < p.H; h0 += kTileHeads) {
        float acc[4][4] = {};
        for (int64_t k0 = 0; k0 < p.dim; k0 += kTileDims) {
            __syncthreads();  // the previous stage is read
            for (int i = threadIdx.x; i < kTileEntries * kTileDims / 4; i += blockDim.x) {
                const int r = i / (kTileDims / 4), c = 4 * (i % (kTileDims / 4));
                const int64_t e = e0 + r, h = h0 + r;
                float4 kv = make_float4(0, 0, 0, 0), qv = make_float4(0, 0, 0, 0);
                if (e < p.T && k0 + c < p.dim)
                    kv = __ldg(reinterpret_cast<const float4*>(p.keys + e * p.ld_keys + k0 + c));
                if (h < p.H && k0 + c < p.dim)
                    qv = __ldg(reinterpret_cast<const float4*>(p.q + t * p.q_s0 + h * p.q_s1 + k0 + c));
                ks[c][r] = kv.x, ks[c + 1][r] = kv.y, ks[c + 2][r] = kv.z, ks[c + 3][r] = kv.w;
                qs[c][r] = qv.x, qs[c + 1][r] = qv.y, qs[c + 2][r] = qv.z, qs[c + 3][r] = qv.w;
            }
            __syncthreads();
#pragma unroll 8
            for (int kk = 0; kk < kTileDims; ++kk) {
                const float4 a = *reinterpret_cast<const float4*>(&ks[kk][4 * ty]);
                const float4 b = *reinterpret_cast<const float4*>(&qs[kk][4 * tx]);
                const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
            }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t h = h0 + 4 * tx + j;
            const float wh = h < p.H ? __ldg(p.w + t * p.ld_w + h) * p.weight_scale : 0.0f;
#pragma unroll
            for (int i = 0; i < 4; ++i) score[i] += fmaxf(acc[i][j], 0.0f) * p.score_scale * wh;
        }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) score[i] += __shfl_xor_sync(0xffffffffu, score[i], o);
    const int64_t visible = (p.pos0 + t + 1) / p.rate;
    if (tx < 4) {  // thread tx writes entry 4 ty + tx
        const int64_t w = e0 + 4 * ty + tx;
        const float v = tx == 0 ? score[0] : tx == 1 ? score[1] : tx == 2 ? score[2] : score[3];
        if (w < p.T) S[t * p.T + w] = w < visible ? v : -INFINITY;
    }
}

// grid (ceil(T / 64), L), 256 threads.
__global__ void __launch_bounds__(256) score_tiled_kernel(IndexerParams p, float* S) {
    allow_early_next();
    score_tiled(p, S, blockIdx.y, int64_t(blockIdx.x) * kTileEntries);
}

__device__ __forceinline__ uint64_t sort_key(float s, int64_t w) {
    uint32_t u = __float_as_uint(s);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t(u) << 32) | uint64_t(0xffffffffu - uint32_t(w));
}

// Query row t's top-k, by one block of 1024 threads.
__device__ __forceinline__ void topk_row(const IndexerParams& p, const float* S, int64_t t) {
    __shared__ uint32_t hist[256];
    __shared__ uint64_t prefix_s;
    __shared__ int64_t need_s;
    __shared__ uint64_t cand[kMaxTopk];
    __shared__ int n_cand;
    const float* row = S + t * p.T;
    uint64_t prefix = 0;
    int64_t need = p.k;  // rank of the k-th largest among keys matching the prefix
    // with k >= T every key is a winner: no select (the smallest key, 0, admits them all)
    for (int pass = 0; pass < (p.k >= p.T ? 0 : 8); ++pass) {
        const int shift = 56 - 8 * pass;
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        const uint64_t mask = pass == 0 ? 0 : (~uint64_t(0) << (shift + 8));
        for (int64_t w = threadIdx.x; w < p.T; w += blockDim.x) {
            const uint64_t key = sort_key(row[w], w);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1u);
        }
        __syncthreads();
        if (threadIdx.x < 32) {  // the bin holding the need-th largest: lane l scans bins 255 - 8 l - j
            const int lane = int(threadIdx.x);
            uint32_t c[8], sum = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) sum += (c[j] = hist[255 - 8 * lane - j]);
            uint32_t incl = sum;  // keys in the bins of lanes 0..lane
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += v;
            }
            int64_t above = incl - sum;
            if (above < need && need <= int64_t(incl)) {  // exactly one lane
                int b = 255 - 8 * lane;
                for (int j = 0; j < 7 && above + c[j] < need; ++j, --b) above += c[j];
                prefix_s = prefix | (uint64_t(b) << shift);
                need_s = need - above;
            }
        }
        __syncthreads();
        prefix = prefix_s;
        need = need_s;
        __syncthreads();
    }
    // prefix is now the k-th largest key; exactly k keys are >= it
    if (threadIdx.x == 0) n_cand = 0;
    __syncthreads();
    for (int64_t w = threadIdx.x; w < p.T; w += blockDim.x) {
        const uint64_t key = sort_key(row[w], w);
        if (key >= prefix) cand[atomicAdd(&n_cand, 1)] = key;
    }
    __syncthreads();
    int n = 1;
    while (n < p.k) n <<= 1;
    for (int i = int(p.k) + threadIdx.x; i < n; i += blockDim.x) cand[i] = 0;
    __syncthreads();
    // bitonic sort, descending
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const int j = i ^ stride;
                if (j > i) {
                    const bool desc = (i & size) == 0;
                    const uint64_t a = cand[i], b = cand[j];
                    if (desc ? (a < b) : (a > b)) {
                        cand[i] = b;
                        cand[j] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
    const int64_t visible = (p.pos0 + t + 1) / p.rate;
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
        const int64_t w = int64_t(0xffffffffu - uint32_t(cand[j] & 0xffffffffu));
        p.picks[t * p.ld_picks + j] = w < visible ? int32_t(w) : -1;
    }
}

__global__ void __launch_bounds__(1024) topk_kernel(IndexerParams p, const float* S) {
    allow_early_next();
    topk_row(p, S, blockIdx.x);
}

// Several sequences' calls: job blockIdx.z (scores) or blockIdx.y (top-k) with its own scores S.
struct IndexerJob {
    IndexerParams p;
    float* S;
};

__global__ void __launch_bounds__(kWarpEntries * 32) scores_warp_kernel(const IndexerJob* jobs) {
    allow_early_next();
    const IndexerJob j = jobs[blockIdx.z];
    if (blockIdx.y < j.p.L) score_warp(j.p, j.S, blockIdx.y);  // block-uniform: before any barrier
}

__global__ void __launch_bounds__(256) scores_tiled_kernel(const IndexerJob* jobs) {
    allow_early_next();
    const IndexerJob j = jobs[blockIdx.z];
    if (blockIdx.y < j.p.L &&
        int64_t(blockIdx.x) * kTileEntries < j.p.T)  // block-uniform: before any barrier
        score_tiled(j.p, j.S, blockIdx.y, int64_t(blockIdx.x) * kTileEntries);
}

__global__ void __launch_bounds__(1024) topks_kernel(const IndexerJob* jobs) {
    allow_early_next();
    const IndexerJob j = jobs[blockIdx.y];
    if (blockIdx.x < j.p.L && j.p.k > 0) topk_row(j.p, j.S, blockIdx.x);
}

}  // namespace

int indexer_max_topk() { return kMaxTopk; }

bool indexer_warp_supported(const IndexerParams& p) {
    auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    return p.dim % 4 == 0 && p.dim <= 4 * 32 * kMaxDim4 && (p.H + 31) / 32 * 32 * p.dim <= kWarpSmemFloats &&
           p.H <= kWarpMaxHeads && p.q_s1 % 4 == 0 && p.q_s0 % 4 == 0 && p.ld_keys % 4 == 0 && aligned(p.q) &&
           aligned(p.keys);
}

bool indexer_tiled_supported(const IndexerParams& p) {
    auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    return p.dim % 4 == 0 && p.q_s1 % 4 == 0 && p.q_s0 % 4 == 0 && p.ld_keys % 4 == 0 && aligned(p.q) &&
           aligned(p.keys) && p.T <= int64_t(kTileEntries) * 65535;
}

void launch_indexer_topk(const IndexerParams& p, Scratch& scratch, Stream s, IndexerVariant v) {
    if (p.L == 0 || p.k == 0) return;
    float* S = static_cast<float*>(scratch.get(0, size_t(p.L * p.T) * sizeof(float)));
    if (v == IndexerVariant::kMma) {
        launch_indexer_scores_mma(p, S, scratch, s);
        topk_kernel<<<unsigned(p.L), 1024, 0, as_stream(s)>>>(p, S);
        return;
    }
    if (v == IndexerVariant::kTiled) {
        score_tiled_kernel<<<dim3(unsigned(blocks_for(p.T, kTileEntries)), unsigned(p.L)), 256, 0,
                             as_stream(s)>>>(p, S);
        topk_kernel<<<unsigned(p.L), 1024, 0, as_stream(s)>>>(p, S);
        return;
    }
    if (v == IndexerVariant::kWarpHeads) {
        const unsigned blocks = std::min<unsigned>(blocks_for(p.T, kWarpEntries), kWarpMaxBlocks);
        score_warp_kernel<<<dim3(blocks, unsigned(p.L)), kWarpEntries * 32, 0, as_stream(s)>>>(p, S);
        topk_kernel<<<unsigned(p.L), 1024, 0, as_stream(s)>>>(p, S);
        return;
    }
    const size_t smem = (size_t(p.H * p.dim) + size_t(kEntries * (p.dim + 1)) + 4 * kEntries) * sizeof(float);
    raise_dynamic_smem(score_kernel, smem);
    score_kernel<<<dim3(blocks_for(p.T, kEntries), unsigned(p.L)), 256, smem, as_stream(s)>>>(p, S);
    topk_kernel<<<unsigned(p.L), 1024, 0, as_stream(s)>>>(p, S);
}

void launch_indexer_topks(const IndexerParams* ps, int64_t count, Scratch& scratch, Stream s,
                          IndexerVariant v) {
    if (count == 1) return launch_indexer_topk(ps[0], scratch, s, v);  // no table
    std::vector<IndexerJob> jobs;
    int64_t scores = 0, L = 0, T = 0;
    for (int64_t i = 0; i < count; ++i) {
        if (ps[i].L == 0 || ps[i].k == 0) continue;
        jobs.push_back({ps[i], nullptr});
        scores += ps[i].L * ps[i].T, L = std::max(L, ps[i].L), T = std::max(T, ps[i].T);
    }
    if (jobs.empty()) return;
    // scratch 11: the job table; scratch 0: the scores, one block of L x T per job
    auto* dev = static_cast<IndexerJob*>(scratch.get(11, jobs.size() * sizeof(IndexerJob)));
    auto* S = static_cast<float*>(scratch.get(0, size_t(scores) * sizeof(float)));
    for (IndexerJob& j : jobs) j.S = S, S += j.p.L * j.p.T;
    DI_CUDA_CHECK(cudaMemcpyAsync(dev, jobs.data(), jobs.size() * sizeof(IndexerJob), cudaMemcpyHostToDevice,
                                  as_stream(s)));  // pageable: staged before the call returns
    const unsigned n = unsigned(jobs.size());
    if (v == IndexerVariant::kTiled) {
        scores_tiled_kernel<<<dim3(unsigned(blocks_for(T, kTileEntries)), unsigned(L), n), 256, 0,
                              as_stream(s)>>>(dev);
    } else {
        const unsigned blocks = std::min<unsigned>(blocks_for(T, kWarpEntries), kWarpMaxBlocks);
        scores_warp_kernel<<<dim3(blocks, unsigned(L), n), kWarpEntries * 32, 0, as_stream(s)>>>(dev);
    }
    topks_kernel<<<dim3(unsigned(L), n), 1024, 0, as_stream(s)>>>(dev);
}

}  // namespace di::cuda
