// The key slots of one query, shared by the attention kernels that walk all of a query's keys in one block
// (per_query in attention.cu, mma in attention_mma.cu, mma64 in attention_mma64.cu): the window, then the
// causal entries or the deduplicated picks; and the online softmax step of the tensor-core kernels.
#pragma once

#include <cstdint>

#include "ops/cuda/device_util.cuh"

namespace di::cuda {

struct QueryKeys {
    int64_t lo, n_win, n_comp;  // window positions [lo, lo + n_win), then n_comp compressed entries
};

// Stable in-place compaction of list[j] where keep[j], by the whole block (a ballot per warp, the warps'
// counts added in order; a round of blockDim.x entries reads all its entries before any is written, and
// writes only below the next round's). Returns the kept count to every thread. (One thread walking k = 512
// entries took ~2.5 us a block.)
__device__ __forceinline__ int64_t compact_kept(int32_t* list, const int32_t* keep, int64_t k) {
    __shared__ int warp_count[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    int64_t base = 0;
    for (int64_t j0 = 0; j0 < k; j0 += blockDim.x) {
        const int64_t j = j0 + threadIdx.x;
        const bool kept = j < k && keep[j] != 0;
        const int32_t w = kept ? list[j] : 0;
        const unsigned ballot = __ballot_sync(0xffffffffu, kept);
        if (lane == 0) warp_count[warp] = __popc(ballot);
        __syncthreads();
        int64_t before = base, total = base;
        for (int i = 0; i < warps; ++i) {
            if (i < warp) before += warp_count[i];
            total += warp_count[i];
        }
        if (kept) list[before + __popc(ballot & ((1u << lane) - 1u))] = w;
        base = total;
        __syncthreads();  // warp_count and this round's writes, before the next round
    }
    return base;
}

// Query t's keys; for picks, `list` (2 k ints of shared memory) ends up holding the first occurrence of each
// valid pick in pick order (flags and compaction in parallel). Every thread of the block calls it. `first`
// (shared memory for first_cap ints, free until the call returns): where it holds n_comp ints, each entry's
// first pick is found as the smallest index of the picks naming it (atomicMin, three passes); otherwise each
// pick is compared with every pick before it (O(k^2) dependent shared loads: ~640 for a block's slowest
// thread at k = 512, ~10 us).
__device__ __forceinline__ QueryKeys query_keys(const AttentionParams& p, int64_t t, int32_t* list,
                                                int32_t* first = nullptr, int64_t first_cap = 0) {
    const int64_t pos = p.pos0 + t;
    const int64_t lo = max(pos - p.window + 1, p.pos0 - p.n_cached);
    int64_t n_comp = 0;
    if (p.comp_mask == AttnCompMask::kCausal) {
        n_comp = min(p.n_comp, (pos + 1) / p.rate);
    } else if (p.comp_mask == AttnCompMask::kPicks) {
        const int32_t* pk = p.picks + t * p.ld_picks;
        for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) list[j] = pk[j];
        __syncthreads();
        int32_t* keep = list + p.k;
        const auto valid = [&](int32_t w) { return w >= 0 && w < p.n_comp; };
        if (first != nullptr && p.n_comp <= first_cap) {
            for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x)
                if (valid(list[j])) first[list[j]] = INT32_MAX;
            __syncthreads();
            for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x)
                if (valid(list[j])) atomicMin(first + list[j], int32_t(j));
            __syncthreads();
            for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x)
                keep[j] = valid(list[j]) && first[list[j]] == int32_t(j);
        } else {
            for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
                const int32_t w = list[j];
                bool ok = valid(w);
                for (int64_t i = 0; i < j && ok; ++i) ok = list[i] != w;
                keep[j] = ok;
            }
        }
        __syncthreads();
        n_comp = compact_kept(list, keep, p.k);
    }
    return {lo, pos - lo + 1, n_comp};
}

// Key slot j of a query: window slot j < n_win (the ring or the chunk's own rows), then entry j - n_win.
__device__ __forceinline__ const float* key_row(const AttentionParams& p, int64_t j, int64_t lo,
                                                int64_t n_win, const int32_t* list) {
    if (j < n_win) {
        const int64_t pp = lo + j;
        return pp < p.pos0 ? p.ring + (pp % (p.window - 1)) * p.ld_ring : p.kv + (pp - p.pos0) * p.ld_kv;
    }
    const int64_t c = j - n_win;
    return p.comp + (p.comp_mask == AttnCompMask::kCausal ? c : int64_t(list[c])) * p.ld_comp;
}

// One tile of 8 NT keys of the online softmax on m16n8k16 score fragments (or a warp's rows of a wgmma
// accumulator: the same layout; s[nt][v]: rows g (v < 2) and g + 8, keys 8 nt + 2q + (v & 1); -inf for keys
// past the end): m moves to the rows' running max, s becomes exp(s - m), l = l f + the tile's sum (over the
// quad), and f = exp(m_old - m_new) is what the accumulators must be multiplied by.
// kBase2: scores and m already times log2(e), the exponentials base 2 (one ex2 each).
template <bool kBase2 = false, int NT>
__device__ __forceinline__ void online_softmax_tile(float (&s)[NT][4], float (&m)[2], float (&l)[2],
                                                    float (&f)[2]) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int v = 0; v < 4; ++v) mx[v >> 1] = fmaxf(mx[v >> 1], s[nt][v]);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        const float m_new = fmaxf(m[i], mx[i]);
        f[i] = kBase2 ? exp2f(m[i] - m_new) : expf(m[i] - m_new);
        m[i] = m_new;
    }
    float ps[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            // exp(-inf) = 0 for keys past the end
            s[nt][v] = kBase2 ? exp2f(s[nt][v] - m[v >> 1]) : expf(s[nt][v] - m[v >> 1]);
            ps[v >> 1] += s[nt][v];
        }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        ps[i] += __shfl_xor_sync(0xffffffffu, ps[i], 1);
        ps[i] += __shfl_xor_sync(0xffffffffu, ps[i], 2);
        l[i] = l[i] * f[i] + ps[i];
    }
}

}  // namespace di::cuda
