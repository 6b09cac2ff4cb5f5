// mHC hyper-connections: hc_mult residual streams mixed around every sub-layer.
//   pre:  n = rms(concat streams); mix = fn . n;  pre_i = sigmoid(mix_i s0 + b_i) + hc_eps;
//         post_i = 2 sigmoid(mix_{hc+i} s1 + b_{hc+i});  comb = sinkhorn(softmax_rows(mix_{2hc..} s2 + b) +
//         hc_eps) x = sum_i pre_i stream_i
//   post: out_k = post_k * a + sum_j comb[j, k] * stream_j            (comb applied transposed)
//   head: pre_i = sigmoid((fn . n)_i s + b_i) + hc_eps;  out = sum_i pre_i stream_i
// Sinkhorn: columns first, then (iters - 1) x (rows, columns), each dividing by (sum + hc_eps).
// Streams are f32 (exact) or bf16 (native, as DeepSeek's inference code keeps them): read as f32, post's
// f32 result rounded to bf16 (nearest even) where it stores bf16 streams.
// ref: transformers 5.17 DeepseekV4HyperConnection / DeepseekV4HyperHead.
#pragma once

#include "ops/op_common.h"

namespace di::ops {

struct MhcPreArgs {
    TensorView streams;  // f32|bf16 [n, hc_mult, hidden_dim]
    TensorView fn;       // f32 [(2 + hc_mult) * hc_mult, hc_mult * hidden_dim]
    TensorView base;     // f32 [(2 + hc_mult) * hc_mult]
    TensorView scale;    // f32 [3]
    TensorView x;        // f32 [n, hidden_dim] out: collapsed input of the sub-layer
    TensorView post;     // f32 [n, hc_mult] out
    TensorView comb;     // f32 [n, hc_mult, hc_mult] out
    float norm_eps = 1e-6f;
    float hc_eps = 1e-6f;
    int sinkhorn_iters = 20;
    // The native precision's permission: a prefill's mixing products may round their inputs to TF32, as
    // DeepSeek's own HC pre-norm GEMM does (CUDA at >= 2,048 tokens); ref and cpu compute exactly as always.
    bool tf32 = false;
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, streams, Role::kIn);
        DI_VISIT(f, fn, Role::kIn);
        DI_VISIT(f, base, Role::kIn);
        DI_VISIT(f, scale, Role::kIn);
        DI_VISIT(f, x, Role::kOut);
        DI_VISIT(f, post, Role::kOut);
        DI_VISIT(f, comb, Role::kOut);
    }
};
void check(const MhcPreArgs& a);

struct MhcPostArgs {
    TensorView streams;  // f32|bf16 [n, hc_mult, hidden_dim] streams before the sub-layer
    TensorView a;        // f32 [n, hidden_dim] sub-layer output
    TensorView post;     // f32 [n, hc_mult]
    TensorView comb;     // f32 [n, hc_mult, hc_mult]
    TensorView out;      // streams' dtype [n, hc_mult, hidden_dim], must not alias streams
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, streams, Role::kIn);
        DI_VISIT(f, a, Role::kIn);
        DI_VISIT(f, post, Role::kIn);
        DI_VISIT(f, comb, Role::kIn);
        DI_VISIT(f, out, Role::kOut);
    }
};
void check(const MhcPostArgs& a);

struct HcHeadArgs {
    TensorView streams;  // f32|bf16 [n, hc_mult, hidden_dim]
    TensorView fn;       // f32 [hc_mult, hc_mult * hidden_dim]
    TensorView base;     // f32 [hc_mult]
    TensorView scale;    // f32 [1]
    TensorView out;      // f32 [n, hidden_dim]
    float norm_eps = 1e-6f;
    float hc_eps = 1e-6f;
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, streams, Role::kIn);
        DI_VISIT(f, fn, Role::kIn);
        DI_VISIT(f, base, Role::kIn);
        DI_VISIT(f, scale, Role::kIn);
        DI_VISIT(f, out, Role::kOut);
    }
};
void check(const HcHeadArgs& a);

}  // namespace di::ops
