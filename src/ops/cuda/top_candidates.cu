// One block per row. The C best ids by (value descending, id ascending) are the C largest of the keys
// (orderable value bits << 32) | (~id), which are distinct: a radix select of the C-th largest key (eight
// passes of an 8-bit digit over the row, which stays in L2), then the C keys at or above it gathered and
// sorted in shared memory (bitonic). The sums are double, each a fixed-order block reduction: the same bits
// on every run, though not the host's id-order bits (the sampler's draws agree but within rounding of a
// boundary). Rows with a non-finite value report its first index; their other outputs mean nothing.
#include <climits>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/early_launch.cuh"
#include "ops/cuda/top_candidates.h"

namespace di::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ uint64_t rank_key(float f, int64_t v) {
    uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);  // -0 ranks as +0 (the host compares values)
    u ^= (u >> 31) ? 0xFFFFFFFFu : 0x80000000u;          // larger float, larger unsigned
    return (uint64_t(u) << 32) | uint64_t(0xFFFFFFFFu - uint32_t(v));
}

__global__ void __launch_bounds__(kThreads)
    top_candidates_kernel(const float* x, int64_t ldx, int64_t V, const float* temperature, int32_t* ids,
                          float* values, int64_t C, double* sums, int32_t* bad) {
    allow_early_next();
    __shared__ unsigned hist[256];
    __shared__ uint64_t keys[kTopCandidatesMax];
    __shared__ double red[32];
    __shared__ int s_digit, s_need, s_count, s_bad;
    const int64_t r = blockIdx.x;
    const float* row = x + r * ldx;
    const int tid = threadIdx.x;

    if (tid == 0) s_bad = INT_MAX, s_count = 0;
    __syncthreads();
    int nb = INT_MAX;
    for (int64_t v = tid; v < V; v += kThreads)
        if (!isfinite(row[v])) {
            nb = int(v);
            break;
        }
    if (nb != INT_MAX) atomicMin(&s_bad, nb);

    // The C-th largest key, a byte at a time from the top.
    uint64_t prefix = 0, mask = 0;
    int need = int(C);
    for (int b = 7; b >= 0; --b) {
        for (int d = tid; d < 256; d += kThreads) hist[d] = 0;
        __syncthreads();
        for (int64_t v = tid; v < V; v += kThreads) {
            // logits crowd a few digits: one atomic per group of lanes with the same digit
            const uint64_t k = rank_key(row[v], v);
            const bool in = (k & mask) == prefix;
            const unsigned lane = tid & 31u, digit = unsigned(k >> (8 * b)) & 255u;
            const unsigned peers = __match_any_sync(__activemask(), in ? digit : 256u + lane);
            if (in && lane == unsigned(__ffs(int(peers)) - 1))
                atomicAdd(&hist[digit], unsigned(__popc(peers)));
        }
        __syncthreads();
        if (tid == 0) {
            int above = 0, d = 255;
            for (; d > 0 && above + int(hist[d]) < need; --d) above += int(hist[d]);
            s_digit = d, s_need = need - above;
        }
        __syncthreads();
        prefix |= uint64_t(s_digit) << (8 * b);
        mask |= uint64_t(0xFFu) << (8 * b);
        need = s_need;
    }
    // The C keys >= it (exactly C: the keys are distinct), padded with zeros (below every key) to a power of
    // two.
    int n2 = 1;
    while (n2 < int(C)) n2 <<= 1;
    for (int i = tid; i < n2; i += kThreads) keys[i] = 0;
    __syncthreads();
    for (int64_t v = tid; v < V; v += kThreads) {
        const uint64_t k = rank_key(row[v], v);
        if (k >= prefix) {
            const int at = atomicAdd(&s_count, 1);
            if (at < int(C)) keys[at] = k;
        }
    }
    __syncthreads();
    for (int k = 2; k <= n2; k <<= 1)  // bitonic, descending
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = tid; i < n2; i += kThreads) {
                const int o = i ^ j;
                if (o > i) {
                    const uint64_t a = keys[i], c = keys[o];
                    if ((i & k) == 0 ? a < c : a > c) keys[i] = c, keys[o] = a;
                }
            }
            __syncthreads();
        }
    for (int i = tid; i < int(C); i += kThreads) {
        const int32_t id = int32_t(0xFFFFFFFFu - uint32_t(keys[i]));
        ids[r * C + i] = id;
        values[r * C + i] = row[id];
    }

    // The sampler's sums over the row, in double.
    const double max = double(row[int32_t(0xFFFFFFFFu - uint32_t(keys[0]))]);
    double s1 = 0;
    for (int64_t v = tid; v < V; v += kThreads) s1 += exp(double(row[v]) - max);
    const double sum_1 = block_sum_d(s1, red);
    double sum_t = 0, total_t = 0;
    const float T = temperature[r];
    if (T > 0.0f) {
        const double t = double(T), m = max / t;
        double st = 0;
        for (int64_t v = tid; v < V; v += kThreads) st += exp(double(row[v]) / t - m);
        sum_t = block_sum_d(st, red);
        double tt = 0;
        for (int64_t v = tid; v < V; v += kThreads) tt += exp(double(row[v]) / t - m) / sum_t;
        total_t = block_sum_d(tt, red);
    }
    if (tid == 0) {
        sums[3 * r] = sum_1, sums[3 * r + 1] = sum_t, sums[3 * r + 2] = total_t;
        bad[r] = s_bad == INT_MAX ? -1 : s_bad;
    }
}

}  // namespace

void launch_top_candidates(const float* x, int64_t ldx, int64_t n, int64_t V, const float* temperature,
                           int32_t* ids, float* values, int64_t C, double* sums, int32_t* bad, Stream s) {
    if (n == 0) return;
    top_candidates_kernel<<<unsigned(n), kThreads, 0, as_stream(s)>>>(x, ldx, V, temperature, ids, values, C,
                                                                      sums, bad);
}

}  // namespace di::cuda
