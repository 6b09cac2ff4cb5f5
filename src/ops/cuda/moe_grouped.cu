// Routed experts with each selected expert's weights streamed once per step (decode and small batches):
//   plan:    the step's (token, slot) pairs grouped by expert: active experts in ascending id, each with
//            its pairs in pair order (one block; a fixed order, so deterministic)
//   up:      h[pair, r] = swiglu(W1_e[r] . x_t, W3_e[r] . x_t) for every pair of expert e, W1/W3 rows read
//            once for all of them (gemv.cuh warp rows; grid.y = active expert slot)
//   down:    y[pair, c] = W2_e[c] . h[pair]
//   combine: out[t] = sum_j w[t, j] y[t, j] in slot order (launch_moe_combine, moe.cu)
// A pair's arithmetic is the same whatever else chose its expert: batch-invariant and deterministic.
//   bytes: the selected experts' weights once (+ x, h, y) -> bound by 3 * I * D / 2 bytes per active expert
#include <algorithm>

#include "ops/cuda/gemv.cuh"
#include "ops/cuda/moe_plan.cuh"
#include "ops/cuda/smem_limit.h"

namespace di::cuda {
namespace {

using namespace gemv;

constexpr int kRows = 2, kWarps = 8;
// Units in flight per row: fewer with 4 token passes (their accumulators hold the registers).
template <int NT>
constexpr int kUnits = NT == 1 ? 4 : 2;

using Plan = MoePlan;

// Counting sort of the pairs by expert: warp w counts and then places the pairs of its segment [w P / W, ..)
// in pair order, after the segments of warps before it, so each expert's pairs stay in pair order (the same
// plan for any W). W = 32 for a prefill's pairs: each warp walks its segment 32 pairs at a time with a load
// latency each, ~100 us for 24,576 pairs at W = 8.
template <int kPlanWarps>
__global__ void __launch_bounds__(32 * kPlanWarps) moe_plan_kernel(MoeParams p, Plan plan) {
    allow_early_next();
    extern __shared__ int32_t sm[];
    const int64_t E = p.n_experts;
    int32_t* count = sm;          // [E]
    int32_t* start = sm + E;      // [E]
    int32_t* wnext = sm + 2 * E;  // [kPlanWarps][E]: warp w's pairs per expert, then its next position
    const int64_t P = p.n * p.k;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t seg = (P + kPlanWarps - 1) / kPlanWarps, q0 = min(P, warp * seg), q1 = min(P, q0 + seg);
    for (int64_t i = threadIdx.x; i < kPlanWarps * E; i += blockDim.x) wnext[i] = 0;
    __syncthreads();
    for (int64_t q = q0 + lane; q < q1; q += 32) {
        const int e = moe_expert_of(p, q);
        if (e >= 0) atomicAdd(&wnext[warp * E + e], 1);  // integer counts: order-free
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
        int32_t c = 0;
        for (int w = 0; w < kPlanWarps; ++w) c += wnext[w * E + e];
        count[e] = c;
    }
    __syncthreads();
    // exclusive prefix over experts (pair offsets and active-slot numbers, active slots in ascending
    // expert id): each thread scans a run of consecutive experts, the runs' totals by a block scan
    const int64_t per = (E + blockDim.x - 1) / blockDim.x, e0 = threadIdx.x * per;
    const int64_t e1 = min(E, e0 + per);
    int32_t pairs_run = 0, active_run = 0;
    for (int64_t e = e0; e < e1; ++e) pairs_run += count[e], active_run += count[e] > 0;
    __shared__ int32_t warp_tot[2][32];
    const int nw = (blockDim.x + 31) >> 5;
    int32_t inc_p = pairs_run, inc_a = active_run;  // inclusive warp scans
    for (int o = 1; o < 32; o <<= 1) {
        const int32_t up_p = __shfl_up_sync(0xffffffffu, inc_p, o),
                      up_a = __shfl_up_sync(0xffffffffu, inc_a, o);
        if (lane >= o) inc_p += up_p, inc_a += up_a;
    }
    if (lane == 31) warp_tot[0][warp] = inc_p, warp_tot[1][warp] = inc_a;
    __syncthreads();
    int32_t off = inc_p - pairs_run, a = inc_a - active_run;
    for (int w = 0; w < warp; ++w) off += warp_tot[0][w], a += warp_tot[1][w];
    for (int64_t e = e0; e < e1; ++e) {
        start[e] = off;
        if (count[e] > 0) {
            plan.expert[a] = int32_t(e);
            plan.begin[a] = off;
            ++a;
        }
        off += count[e];
    }
    if (threadIdx.x == blockDim.x - 1) {  // the last run ends at the totals
        int32_t tot_p = 0, tot_a = 0;
        for (int w = 0; w < nw; ++w) tot_p += warp_tot[0][w], tot_a += warp_tot[1][w];
        plan.begin[tot_a] = tot_p;
        *plan.n_active = tot_a;
        if (plan.work != nullptr) plan.work[0] = plan.work[1] = 0;
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {  // each warp's first position per expert
        int32_t at = start[e];
        for (int w = 0; w < kPlanWarps; ++w) {
            const int32_t c = wnext[w * E + e];
            wnext[w * E + e] = at;
            at += c;
        }
    }
    __syncthreads();
    int32_t* next = wnext + warp * E;
    for (int64_t base = q0; base < q1; base += 32) {  // 32 pairs at a time, ranked among equal experts
        const int64_t q = base + lane;
        const int e = q < q1 ? moe_expert_of(p, q) : -1;
        const unsigned same = __match_any_sync(0xffffffffu, e);
        if (e >= 0) plan.pairs[next[e] + __popc(same & ((1u << lane) - 1u))] = int32_t(q);
        __syncwarp();
        if (e >= 0 && lane == __ffs(same) - 1) next[e] += __popc(same);
        __syncwarp();
    }
}

// grid (G, max_active): block (bx, a) stages NT pairs' x of active expert a in shared memory, then its warps
// walk the row groups bx * 8 + warp, + G * 8, ... of W1 and W3 (R rows each).
template <int F, int NT>
__global__ void __launch_bounds__(256) moe_up_grouped(MoeParams p, Plan plan, float* h) {
    allow_early_next();
    extern __shared__ float4 smem4[];
    float* xsm = reinterpret_cast<float*>(smem4);
    const int a = blockIdx.y;
    if (a >= *plan.n_active) return;  // whole block
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int e = plan.expert[a];
    const WeightRef w1 = p.table[3 * e], w3 = p.table[3 * e + 1];
    const int32_t b = plan.begin[a], cnt = plan.begin[a + 1] - b;
    const int64_t groups = (p.I + kRows - 1) / kRows;
    for (int32_t i0 = 0; i0 < cnt; i0 += NT) {
        const int nt = min(NT, cnt - i0);
        const float* xg[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) xg[t] = p.x + (plan.pairs[b + i0 + min(t, nt - 1)] / p.k) * p.ld_x;
        if (i0 > 0) __syncthreads();
        stage_x<F, NT>(xg, nt, p.D, xsm);
        __syncthreads();
        for (int64_t g = int64_t(blockIdx.x) * kWarps + warp; g < groups; g += int64_t(gridDim.x) * kWarps) {
            const int64_t o0 = g * kRows;
            float acc[2][kRows][NT];  // W1 and W3 rows in one pass: both matrices' loads in flight at once
            const WeightRef w13[2] = {w1, w3};
            warp_rows_m<F, NT, kRows, kUnits<NT>, 2>(w13, o0, xsm, nt, acc);
            auto& gv = acc[0];
            auto& uv = acc[1];
#pragma unroll
            for (int r = 0; r < kRows; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t) {
                    if (lane != r * NT + t || t >= nt || o0 + r >= p.I) continue;
                    h[int64_t(plan.pairs[b + i0 + t]) * p.I + o0 + r] =
                        swiglu_clamped(gv[r][t], uv[r][t], p.limit);
                }
        }
    }
}

// grid (G, max_active): rows of W2 against the staged h of each pair.
template <int F, int NT>
__global__ void __launch_bounds__(256) moe_down_grouped(MoeParams p, Plan plan, const float* h, float* y) {
    allow_early_next();
    extern __shared__ float4 smem4[];
    float* xsm = reinterpret_cast<float*>(smem4);
    const int a = blockIdx.y;
    if (a >= *plan.n_active) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const WeightRef w2 = p.table[3 * plan.expert[a] + 2];
    const int32_t b = plan.begin[a], cnt = plan.begin[a + 1] - b;
    const int64_t groups = (p.D + kRows - 1) / kRows;
    for (int32_t i0 = 0; i0 < cnt; i0 += NT) {
        const int nt = min(NT, cnt - i0);
        const float* xg[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) xg[t] = h + int64_t(plan.pairs[b + i0 + min(t, nt - 1)]) * p.I;
        if (i0 > 0) __syncthreads();
        stage_x<F, NT>(xg, nt, p.I, xsm);
        __syncthreads();
        for (int64_t g = int64_t(blockIdx.x) * kWarps + warp; g < groups; g += int64_t(gridDim.x) * kWarps) {
            const int64_t o0 = g * kRows;
            float acc[kRows][NT];
            warp_rows<F, NT, kRows, kUnits<NT>>(w2, o0, xsm, nt, acc);
#pragma unroll
            for (int r = 0; r < kRows; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t)
                    if (lane == r * NT + t && t < nt && o0 + r < p.D)
                        y[int64_t(plan.pairs[b + i0 + t]) * p.D + o0 + r] = acc[r][t];
        }
    }
}

// Pairs whose expert id is outside [0, E) take no part (their y stays 0), as in moe.cu.
__global__ void zero_kernel(float* y, int64_t n) {
    allow_early_next();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        y[i] = 0.0f;
}

// Blocks per expert: about three resident waves over all active experts, at most one per 8 row groups.
unsigned blocks_per_expert(int64_t rows, unsigned max_active) {
    const int64_t most = (rows + kRows * kWarps - 1) / (kRows * kWarps);
    return unsigned(std::clamp<int64_t>((3 * sm_count() + max_active - 1) / max_active, 1, most));
}

template <int F, int NT>
void launch_fn(const MoeParams& p, const Plan& plan, float* h, float* y, unsigned max_active,
               cudaStream_t s) {
    const size_t smem_up = size_t(NT * staged_floats<F>(p.D)) * sizeof(float);
    const size_t smem_dn = size_t(NT * staged_floats<F>(p.I)) * sizeof(float);
    raise_dynamic_smem(moe_up_grouped<F, NT>, kGemvMaxSmem);
    raise_dynamic_smem(moe_down_grouped<F, NT>, kGemvMaxSmem);
    moe_up_grouped<F, NT>
        <<<dim3(blocks_per_expert(p.I, max_active), max_active), 256, smem_up, s>>>(p, plan, h);
    moe_quantise_h(p, h, p.n * p.k, s);
    moe_down_grouped<F, NT>
        <<<dim3(blocks_per_expert(p.D, max_active), max_active), 256, smem_dn, s>>>(p, plan, h, y);
}

template <int F>
void launch_f(const MoeParams& p, const Plan& plan, float* h, float* y, unsigned max_active, cudaStream_t s) {
    if (p.n == 1)
        launch_fn<F, 1>(p, plan, h, y, max_active, s);  // one token: every expert has one pair
    else
        launch_fn<F, 4>(p, plan, h, y, max_active, s);
}

template <int W>
void launch_plan(const MoeParams& p, const MoePlan& plan, cudaStream_t s) {
    const size_t smem = size_t((2 + W) * p.n_experts) * sizeof(int32_t);
    raise_dynamic_smem(moe_plan_kernel<W>, smem);
    moe_plan_kernel<W><<<1, 32 * W, smem, s>>>(p, plan);
}

}  // namespace

MoePlan moe_plan_buffers(Scratch& scratch, int64_t pairs, unsigned max_active) {
    int32_t* ints =
        static_cast<int32_t*>(scratch.get(3, size_t(4 + 2 * max_active + pairs) * sizeof(int32_t)));
    return {ints, ints + 1, ints + 1 + max_active, ints + 2 + 2 * max_active,
            ints + 2 + 2 * max_active + pairs};
}

void launch_moe_plan(const MoeParams& p, const MoePlan& plan, cudaStream_t s) {
    if (p.n * p.k > 2048)
        launch_plan<32>(p, plan, s);
    else
        launch_plan<8>(p, plan, s);
}

bool moe_grouped_supported(const MoeParams& p) {
    if (p.gemv_format < 0) return false;
    const int64_t units = unit_elems(p.gemv_format);
    if (!(p.n * p.k <= kMoeGroupedMaxPairs && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.ld_x % 4 == 0 &&
          p.I % 4 == 0 && p.D % units == 0 && p.I % units == 0))
        return false;
    const int64_t e = units, nt = p.n == 1 ? 1 : 4;  // staged tokens must fit shared memory
    return nt * std::max(p.D, p.I) / e * (e + 4) * int64_t(sizeof(float)) <= int64_t(kGemvMaxSmem);
}

void launch_moe_grouped(const MoeParams& p, Scratch& scratch, Stream s) {
    const int64_t pairs = p.n * p.k;
    const unsigned max_active = unsigned(std::min(pairs, p.n_experts));
    float* h = static_cast<float*>(scratch.get(1, size_t(pairs * p.I) * sizeof(float)));
    float* y = p.y_out ? p.y_out : static_cast<float*>(scratch.get(2, size_t(pairs * p.D) * sizeof(float)));
    const Plan plan = moe_plan_buffers(scratch, pairs, max_active);
    const cudaStream_t st = as_stream(s);
    zero_kernel<<<unsigned(std::min<int64_t>(blocks_for(pairs * p.D, 256), 1024)), 256, 0, st>>>(y,
                                                                                                 pairs * p.D);
    launch_moe_plan(p, plan, st);
    switch (p.gemv_format) {
        case kF32:
            launch_f<kF32>(p, plan, h, y, max_active, st);
            break;
        case kBF16:
            launch_f<kBF16>(p, plan, h, y, max_active, st);
            break;
        case kF16:
            launch_f<kF16>(p, plan, h, y, max_active, st);
            break;
        case kFp8:
            launch_f<kFp8>(p, plan, h, y, max_active, st);
            break;
        default:
            launch_f<kFp4>(p, plan, h, y, max_active, st);
            break;
    }
    if (p.y_out == nullptr) launch_moe_combine(p, y, s);
}

}  // namespace di::cuda
