// Lightning indexer: scores S[t, w] (one block per (query, 64 entries), keys and q staged in shared memory),
// then an exact top-k per query: 64-bit keys (orderable score << 32 | ~w) make every key unique, so the
// k-th largest is found by an 8-pass radix select and the k winners are bitonic-sorted: best first, ties by
// lower entry id, as ops/indexer.h specifies.
#include "ops/cuda/device_util.cuh"

namespace di::cuda {
namespace {

constexpr int kEntries = 64;    // entries per score block
constexpr int kMaxTopk = 4096;  // bitonic sort capacity in shared memory

// grid (ceil(T / 64), L); 256 threads = 64 entries x 4 head groups; dynamic smem: q [H][dim], keys
// [64][dim+1]
__global__ void __launch_bounds__(256) score_kernel(IndexerParams p, float* S) {
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

__device__ __forceinline__ uint64_t sort_key(float s, int64_t w) {
    uint32_t u = __float_as_uint(s);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t(u) << 32) | uint64_t(0xffffffffu - uint32_t(w));
}

// One block (1024 threads) per query row.
__global__ void __launch_bounds__(1024) topk_kernel(IndexerParams p, const float* S) {
    __shared__ uint32_t hist[256];
    __shared__ uint64_t prefix_s;
    __shared__ int64_t need_s;
    __shared__ uint64_t cand[kMaxTopk];
    __shared__ int n_cand;
    const int64_t t = blockIdx.x;
    const float* row = S + t * p.T;
    uint64_t prefix = 0;
    int64_t need = p.k;  // rank of the k-th largest among keys matching the prefix
    for (int pass = 0; pass < 8; ++pass) {
        const int shift = 56 - 8 * pass;
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        const uint64_t mask = pass == 0 ? 0 : (~uint64_t(0) << (shift + 8));
        for (int64_t w = threadIdx.x; w < p.T; w += blockDim.x) {
            const uint64_t key = sort_key(row[w], w);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int64_t above = 0;
            int b = 255;
            for (; b > 0; --b) {
                if (above + hist[b] >= need) break;
                above += hist[b];
            }
            prefix_s = prefix | (uint64_t(b) << shift);
            need_s = need - above;
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

}  // namespace

int indexer_max_topk() { return kMaxTopk; }

void launch_indexer_topk(const IndexerParams& p, Scratch& scratch, Stream s) {
    if (p.L == 0 || p.k == 0) return;
    float* S = static_cast<float*>(scratch.get(0, size_t(p.L * p.T) * sizeof(float)));
    const size_t smem = (size_t(p.H * p.dim) + size_t(kEntries * (p.dim + 1)) + 4 * kEntries) * sizeof(float);
    static size_t raised = 48 * 1024;
    if (smem > raised) {
        DI_CUDA_CHECK(
            cudaFuncSetAttribute(score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        raised = smem;
    }
    score_kernel<<<dim3(blocks_for(p.T, kEntries), unsigned(p.L)), 256, smem, as_stream(s)>>>(p, S);
    topk_kernel<<<unsigned(p.L), 1024, 0, as_stream(s)>>>(p, S);
}

}  // namespace di::cuda
