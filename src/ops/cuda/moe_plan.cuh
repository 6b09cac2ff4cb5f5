// The step's (token, slot) pairs grouped by expert, on the device (moe_grouped.cu builds it; the grouped and
// split_rows MoE kernels read it): active experts in ascending id, each with its pairs in pair order.
#pragma once

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/fp8_gemm.h"

namespace di::cuda {

struct MoePlan {
    int32_t* n_active;  // [1]
    int32_t* expert;    // [max_active] expert id of active slot a
    int32_t* begin;     // [max_active + 1] first index into `pairs` of slot a
    int32_t* pairs;     // [n * k] pair ids (t * k + j), grouped by expert
    int32_t* work;  // [2] zero after the plan kernel: counters a persistent kernel's blocks take items from
};

// Row `row` of expert e's matrices (W1 and W3 for the up products, NM = 2; W2 for the down one, NM = 1) for
// a thread's 16-byte fp4 unit q: its bytes and its scale row; one row stride for W1 and W3
// (MoeParams::mma_ok).
template <int NM>
struct ExpertRows {
    const uint8_t* w[NM];
    const uint8_t* sc[NM];
    int64_t ld = 0, ld_sc = 0;
};
template <int NM>
__device__ __forceinline__ ExpertRows<NM> expert_rows(const MoeParams& p, int e, int64_t row, int q) {
    ExpertRows<NM> r;
#pragma unroll
    for (int m = 0; m < NM; ++m) {
        const WeightRef& w = p.table[3 * e + (NM == 2 ? m : 2)];
        r.ld = w.ld, r.ld_sc = w.ld_scale;
        r.w[m] = static_cast<const uint8_t*>(w.data) + row * w.ld + q * 16;
        r.sc[m] = static_cast<const uint8_t*>(w.scale) + row * w.ld_scale;
    }
    return r;
}

// The plan's arrays in scratch slot 3, for n * k pairs and at most max_active experts.
MoePlan moe_plan_buffers(Scratch& scratch, int64_t pairs, unsigned max_active);
// One block; a fixed order, so deterministic.
void launch_moe_plan(const MoeParams& p, const MoePlan& plan, cudaStream_t s);

// Expert of a pair, or -1 for ids outside [0, E) or outside the pass's owned experts (such pairs take no
// part).
__device__ __forceinline__ int moe_expert_of(const MoeParams& p, int64_t pair) {
    const int e = p.ids[(pair / p.k) * p.ld_ids + pair % p.k];
    return e < 0 || e >= p.n_experts || e < p.owned_first || e >= p.owned_end ? -1 : e;
}

// Column c of token t's output: the slots' rows of y [n * k, D] weighted in slot order, summed in double (the
// combine of every variant; a pair without an expert adds 0 and its y is not read). kL2: y was written by
// other blocks of the same launch, so it is read through L2.
template <bool kL2 = false>
__device__ __forceinline__ float combine_column(const MoeParams& p, const float* y, int64_t t, int64_t c) {
    double acc = 0;
    for (int64_t j = 0; j < p.k; ++j) {
        const int64_t pair = t * p.k + j;
        const float* src = y + pair * p.D + c;
        const float yv = moe_expert_of(p, pair) < 0 ? 0.0f : kL2 ? __ldcg(src) : *src;
        acc += double(yv) * p.w[t * p.ld_w + j];
    }
    return float(acc);
}

// MoeParams::act_fp8: the swiglu outputs h [pairs, I] quantised in place (rows without an expert too: no
// variant reads them).
inline void moe_quantise_h(const MoeParams& p, float* h, int64_t pairs, cudaStream_t s) {
    if (p.act_fp8) launch_act_quant_dequant(h, p.I, pairs, p.I, h, s);
}

}  // namespace di::cuda
