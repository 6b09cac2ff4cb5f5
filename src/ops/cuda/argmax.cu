// One block per row: each thread keeps the first maximum of its elements (in increasing index order: a
// 16-byte aligned row in float4s, four loads in flight, then its tail), then the block keeps the larger
// value, on a tie the lower index: the first maximum of the row, as the host sampler's greedy rule.
// Non-finite values are skipped and their lowest index reported.
#include <climits>

#include "ops/cuda/argmax.h"
#include "ops/cuda/device_util.cuh"

namespace di::cuda {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ void keep_better(float& v, int& i, float ov, int oi) {
    if (oi != INT_MAX && (i == INT_MAX || ov > v || (ov == v && oi < i))) v = ov, i = oi;
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* x, int64_t ldx, int64_t V, int32_t* ids, int32_t* bad) {
    allow_early_next();
    __shared__ float sv[kThreads / 32];
    __shared__ int si[kThreads / 32], sb[kThreads / 32];
    const float* row = x + int64_t(blockIdx.x) * ldx;
    float best = -INFINITY;
    int bi = INT_MAX, nb = INT_MAX;
    auto take = [&](float f, int64_t v) {  // a thread's elements in increasing index order
        if (!isfinite(f))
            nb = min(nb, int(v));
        else if (bi == INT_MAX || f > best)
            best = f, bi = int(v);
    };
    int64_t v0 = 0;
    if (reinterpret_cast<uintptr_t>(row) % 16 == 0) {  // 4 consecutive elements per thread, 4 loads in flight
        const int64_t n4 = V / 4;
        const float4* r4 = reinterpret_cast<const float4*>(row);
        int64_t j = threadIdx.x;
        for (; j + 3 * kThreads < n4; j += 4 * kThreads) {
            float4 q[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) q[u] = __ldg(r4 + j + u * kThreads);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int64_t v = 4 * (j + u * kThreads);
                take(q[u].x, v), take(q[u].y, v + 1), take(q[u].z, v + 2), take(q[u].w, v + 3);
            }
        }
        for (; j < n4; j += kThreads) {
            const float4 q = __ldg(r4 + j);
            take(q.x, 4 * j), take(q.y, 4 * j + 1), take(q.z, 4 * j + 2), take(q.w, 4 * j + 3);
        }
        v0 = 4 * n4;
    }
    for (int64_t v = v0 + threadIdx.x; v < V; v += kThreads) take(row[v], v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        keep_better(best, bi, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, bi, o));
        nb = min(nb, __shfl_xor_sync(0xffffffffu, nb, o));
    }
    if (lane == 0) sv[warp] = best, si[warp] = bi, sb[warp] = nb;
    __syncthreads();
    if (warp == 0) {
        best = sv[lane], bi = si[lane], nb = sb[lane];  // kThreads / 32 == 32 warps
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            keep_better(best, bi, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, bi, o));
            nb = min(nb, __shfl_xor_sync(0xffffffffu, nb, o));
        }
        if (lane == 0) {
            ids[blockIdx.x] = bi == INT_MAX ? 0 : bi;
            bad[blockIdx.x] = nb == INT_MAX ? -1 : nb;
        }
    }
}

}  // namespace

void launch_argmax(const float* x, int64_t ldx, int64_t n, int64_t V, int32_t* ids, int32_t* bad, Stream s) {
    if (n == 0) return;
    argmax_kernel<<<unsigned(n), kThreads, 0, as_stream(s)>>>(x, ldx, V, ids, bad);
}

}  // namespace di::cuda
