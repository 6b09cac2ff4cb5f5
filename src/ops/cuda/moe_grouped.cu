// Routed experts with each selected expert's weights streamed once per step (decode and small batches):
//   plan:    the step's (token, slot) pairs grouped by expert: active experts in ascending id, each with
//            its pairs in pair order (one block; a fixed order, so deterministic)
//   up:      h[pair, r] = swiglu(W1_e[r] . x_t, W3_e[r] . x_t) for every pair of expert e, W1/W3 rows read
//            once for all of them (gemv.cuh row groups; grid.y = active expert slot)
//   down:    y[pair, c] = W2_e[c] . h[pair]
//   combine: out[t] = sum_j w[t, j] y[t, j] in slot order (launch_moe_combine, moe.cu)
// A pair's arithmetic is the same whatever else chose its expert: batch-invariant and deterministic.
//   bytes: the selected experts' weights once (+ x, h, y) -> bound by 3 * I * D / 2 bytes per active expert
#include "ops/cuda/gemv.cuh"

namespace di::cuda {
namespace {

using namespace gemv;

constexpr int kRows = 4, kWarps = 8, kNT = 4;

struct Plan {
    int32_t* n_active;    // [1]
    int32_t* expert;      // [max_active] expert id of active slot a
    int32_t* begin;       // [max_active + 1] first index into `pairs` of slot a
    int32_t* pairs;       // [n * k] pair ids (t * k + j), grouped by expert
};

__global__ void __launch_bounds__(256) moe_plan_kernel(MoeParams p, Plan plan) {
    extern __shared__ int32_t sm[];
    int32_t* count = sm;              // [E]
    int32_t* start = sm + p.n_experts;  // [E]
    const int64_t P = p.n * p.k;
    for (int64_t e = threadIdx.x; e < p.n_experts; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int64_t q = threadIdx.x; q < P; q += blockDim.x) {
        const int e = p.ids[(q / p.k) * p.ld_ids + q % p.k];
        if (e >= 0 && e < p.n_experts) atomicAdd(&count[e], 1);  // integer counts: order-free
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // exclusive prefix over experts, active slots in ascending expert id
        int32_t off = 0, a = 0;
        for (int64_t e = 0; e < p.n_experts; ++e) {
            start[e] = off;
            if (count[e] > 0) {
                plan.expert[a] = int32_t(e);
                plan.begin[a] = off;
                ++a;
            }
            off += count[e];
        }
        plan.begin[a] = off;
        *plan.n_active = a;
    }
    __syncthreads();
    // Stable placement: a pair's rank among earlier pairs of the same expert (P <= kMoeGroupedMaxPairs).
    for (int64_t q = threadIdx.x; q < P; q += blockDim.x) {
        const int e = p.ids[(q / p.k) * p.ld_ids + q % p.k];
        if (e < 0 || e >= p.n_experts) continue;
        int32_t rank = 0;
        for (int64_t r = 0; r < q; ++r) rank += p.ids[(r / p.k) * p.ld_ids + r % p.k] == e;
        plan.pairs[start[e] + rank] = int32_t(q);
    }
}

// Reduces acc over the W warps of each row group (warp order) into red; returns after a barrier.
template <int NT>
__device__ __forceinline__ void reduce_rows(float acc[kRows][NT], float (*red)[kRows][NT], int warp, int lane) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            const float v = warp_sum(acc[r][t]);
            if (lane == 0) red[warp][r][t] = v;
        }
    __syncthreads();
}

template <int F>
__global__ void __launch_bounds__(256) moe_up_grouped(MoeParams p, Plan plan, int W, float* h) {
    __shared__ float red1[kWarps][kRows][kNT], red3[kWarps][kRows][kNT];
    const int a = blockIdx.y;
    if (a >= *plan.n_active) return;  // whole block: no barrier is skipped by part of it
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, group = warp / W, wi = warp % W;
    const int e = plan.expert[a];
    const WeightRef w1 = p.table[3 * e], w3 = p.table[3 * e + 1];
    const int64_t o0 = (int64_t(blockIdx.x) * (kWarps / W) + group) * kRows;
    const int32_t b = plan.begin[a], cnt = plan.begin[a + 1] - b;
    for (int32_t i0 = 0; i0 < cnt; i0 += kNT) {
        const int nt = min(kNT, cnt - i0);
        const float* xs[kNT];
#pragma unroll
        for (int t = 0; t < kNT; ++t) xs[t] = p.x + (plan.pairs[b + i0 + min(t, nt - 1)] / p.k) * p.ld_x;
        float g[kRows][kNT], u[kRows][kNT];
        rows_partial<F, kNT, kRows>(w1, o0, xs, nt, int64_t(wi) * 32 + lane, int64_t(W) * 32, g);
        rows_partial<F, kNT, kRows>(w3, o0, xs, nt, int64_t(wi) * 32 + lane, int64_t(W) * 32, u);
        reduce_rows<kNT>(g, red1, warp, lane);
        reduce_rows<kNT>(u, red3, warp, lane);
        if (wi == 0 && lane < kRows * kNT) {
            const int r = lane / kNT, t = lane % kNT;
            if (t < nt && o0 + r < p.I) {
                float gs = 0.0f, us = 0.0f;
                for (int j = 0; j < W; ++j) gs += red1[group * W + j][r][t], us += red3[group * W + j][r][t];
                if (p.limit > 0) {  // clamped SwiGLU, as moe.cu and the reference
                    gs = fminf(gs, p.limit);
                    us = fminf(fmaxf(us, -p.limit), p.limit);
                }
                h[int64_t(plan.pairs[b + i0 + t]) * p.I + o0 + r] = float(double(gs) / (1.0 + exp(-double(gs))) * double(us));
            }
        }
        __syncthreads();
    }
}

template <int F>
__global__ void __launch_bounds__(256) moe_down_grouped(MoeParams p, Plan plan, int W, const float* h, float* y) {
    __shared__ float red[kWarps][kRows][kNT];
    const int a = blockIdx.y;
    if (a >= *plan.n_active) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, group = warp / W, wi = warp % W;
    const WeightRef w2 = p.table[3 * plan.expert[a] + 2];
    const int64_t o0 = (int64_t(blockIdx.x) * (kWarps / W) + group) * kRows;
    const int32_t b = plan.begin[a], cnt = plan.begin[a + 1] - b;
    for (int32_t i0 = 0; i0 < cnt; i0 += kNT) {
        const int nt = min(kNT, cnt - i0);
        const float* xs[kNT];
#pragma unroll
        for (int t = 0; t < kNT; ++t) xs[t] = h + int64_t(plan.pairs[b + i0 + min(t, nt - 1)]) * p.I;
        float acc[kRows][kNT];
        rows_partial<F, kNT, kRows>(w2, o0, xs, nt, int64_t(wi) * 32 + lane, int64_t(W) * 32, acc);
        reduce_rows<kNT>(acc, red, warp, lane);
        if (wi == 0 && lane < kRows * kNT) {
            const int r = lane / kNT, t = lane % kNT;
            if (t < nt && o0 + r < p.D) {
                float s = 0.0f;
                for (int j = 0; j < W; ++j) s += red[group * W + j][r][t];
                y[int64_t(plan.pairs[b + i0 + t]) * p.D + o0 + r] = s;
            }
        }
        __syncthreads();
    }
}

// Pairs whose expert id is outside [0, E) take no part (their y stays 0), as in moe.cu.
__global__ void zero_kernel(float* y, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = 0.0f;
}

int elems(int f) { return f == kF32 ? 4 : f == kFp8 ? 16 : f == kFp4 ? 32 : 8; }

template <int F>
void launch_f(const MoeParams& p, const Plan& plan, float* h, float* y, unsigned max_active, cudaStream_t s) {
    const int W_up = gemv_warps_per_row(p.D / elems(F), p.I, kRows);
    const int W_dn = gemv_warps_per_row(p.I / elems(F), p.D, kRows);
    const dim3 up(unsigned((p.I + kRows * (kWarps / W_up) - 1) / (kRows * (kWarps / W_up))), max_active);
    const dim3 dn(unsigned((p.D + kRows * (kWarps / W_dn) - 1) / (kRows * (kWarps / W_dn))), max_active);
    moe_up_grouped<F><<<up, 256, 0, s>>>(p, plan, W_up, h);
    moe_down_grouped<F><<<dn, 256, 0, s>>>(p, plan, W_dn, h, y);
}

}  // namespace

bool moe_grouped_supported(const MoeParams& p) {
    return p.gemv_format >= 0 && p.n * p.k <= kMoeGroupedMaxPairs && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
           p.ld_x % 4 == 0 && p.I % 4 == 0 && p.D % elems(p.gemv_format) == 0 && p.I % elems(p.gemv_format) == 0;
}

void launch_moe_grouped(const MoeParams& p, Scratch& scratch, Stream s) {
    const int64_t pairs = p.n * p.k;
    const unsigned max_active = unsigned(std::min(pairs, p.n_experts));
    float* h = static_cast<float*>(scratch.get(1, size_t(pairs * p.I) * sizeof(float)));
    float* y = static_cast<float*>(scratch.get(2, size_t(pairs * p.D) * sizeof(float)));
    int32_t* ints = static_cast<int32_t*>(scratch.get(3, size_t(2 + 2 * max_active + pairs) * sizeof(int32_t)));
    const Plan plan{ints, ints + 1, ints + 1 + max_active, ints + 2 + 2 * max_active};
    const cudaStream_t st = as_stream(s);
    zero_kernel<<<unsigned(std::min<int64_t>(blocks_for(pairs * p.D, 256), 1024)), 256, 0, st>>>(y, pairs * p.D);
    moe_plan_kernel<<<1, 256, size_t(2 * p.n_experts) * sizeof(int32_t), st>>>(p, plan);
    switch (p.gemv_format) {
        case kF32: launch_f<kF32>(p, plan, h, y, max_active, st); break;
        case kBF16: launch_f<kBF16>(p, plan, h, y, max_active, st); break;
        case kF16: launch_f<kF16>(p, plan, h, y, max_active, st); break;
        case kFp8: launch_f<kFp8>(p, plan, h, y, max_active, st); break;
        default: launch_f<kFp4>(p, plan, h, y, max_active, st); break;
    }
    launch_moe_combine(p, y, s);
}

}  // namespace di::cuda
