// Mixture of experts: routing and the routed experts.
//   route (score-routed): s = phi(logits); ids = top-k of (s + bias); w = s[ids] / (sum + 1e-20) * scaling
//   route (hash-routed):  ids = tid2eid[token];                        w likewise from s = phi(logits)
//   phi = sqrt(softplus) | sigmoid.  Tie rule for top-k: lower expert id first.
//   moe: out[t] = sum over slots j of w[t, j] * W2_e (swiglu(W1_e x, W3_e x)),  e = ids[t, j], summed in slot
//   order; with act = kFp8Block128 (the native precision) x and the swiglu output enter their products
//   quantised per row and 128-column block (ops/act_quant.h), as DeepSeek's inference code runs its FP8 x FP4
//   expert GEMMs (the routing weight still multiplies after W2, as transformers does)
// ref: transformers 5.17 DeepseekV4TopKRouter / DeepseekV4HashRouter / DeepseekV4Experts (grouped_mm).
#pragma once

#include <limits>

#include "ops/linear.h"
#include "ops/op_common.h"

namespace di::ops {

enum class ScoreFunc : uint8_t { kSqrtSoftplus, kSigmoid };

struct RouteArgs {
    TensorView logits;   // f32 [n, n_experts]
    TensorView bias;     // f32 [n_experts] selection bias (score-routed), or empty
    TensorView tid2eid;  // i64|i32 [vocab_size, n_experts_active] (hash-routed), or empty
    TensorView tokens;   // i32 [n] (hash-routed)
    TensorView ids;      // i32 [n, n_experts_active] out
    TensorView weights;  // f32 [n, n_experts_active] out
    ScoreFunc func = ScoreFunc::kSqrtSoftplus;
    float scaling = 1.0f;  // routed_scaling_factor
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, logits, Role::kIn);
        DI_VISIT(f, bias, Role::kIn);
        DI_VISIT(f, tid2eid, Role::kIn);
        DI_VISIT(f, tokens, Role::kIn);
        DI_VISIT(f, ids, Role::kOut);
        DI_VISIT(f, weights, Role::kOut);
    }
};
void check(const RouteArgs& a);

struct ExpertWeights {
    QWeight w1;  // gate [moe_dim, hidden_dim]
    QWeight w3;  // up   [moe_dim, hidden_dim]
    QWeight w2;  // down [hidden_dim, moe_dim]
};

struct MoeArgs {
    TensorView x;                            // f32 [n, hidden_dim]
    TensorView ids;                          // i32 [n, k]
    TensorView weights;                      // f32 [n, k]
    const ExpertWeights* experts = nullptr;  // host array [n_experts] of views on the backend's device
    int64_t n_experts = 0;
    TensorView out;                                        // f32 [n, hidden_dim]
    float limit = std::numeric_limits<float>::infinity();  // swiglu_limit: > 0, +inf no clamp (elementwise.h)
    ActQuant act = ActQuant::kNone;  // kFp8Block128: hidden and moe_dim multiples of 128
    // Expert parallelism (model/expert_partition.h, model/moe_exchange.h) in two calls, with the pairs'
    // outputs gathered from the ranks that ran them between the two (each (token, slot) is computed on one
    // rank only). Pass `experts` of the experts in
    // [expert_first, expert_end): each pair whose expert lies there writes its unweighted output to
    // slots[t, j], every other pair zeros, and out is not written (only those experts' weights are read).
    // Pass `combine`: out = the weighted sum of slots in slot order, exactly as the one-call op combines
    // its pairs; no expert is read. Without slots the op is the one call.
    enum class Pass : uint8_t { kWhole, kExperts, kCombine };
    Pass pass = Pass::kWhole;
    TensorView slots{};  // f32 [n, k, hidden_dim], contiguous
    int64_t expert_first = 0, expert_end = 0;
    std::span<const int64_t> row_groups{};  // x's rows by sequence, as LinearArgs::row_groups
    // Or, where the rows of groups interleave (the tokens expert parallelism gathers from its ranks), each
    // row's group size: i32 [n] (a column view), on the host. At most one of the two.
    TensorView row_sizes{};
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, x, Role::kIn);
        DI_VISIT(f, ids, Role::kIn);
        DI_VISIT(f, weights, Role::kIn);
        DI_VISIT(f, out, Role::kOut);
        DI_VISIT(f, slots, Role::kInOut);
    }
    bool owns(int64_t e) const { return pass != Pass::kExperts || (e >= expert_first && e < expert_end); }
};
void check(const MoeArgs& a);

}  // namespace di::ops
