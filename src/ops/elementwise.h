// Small element-wise ops: embedding gather, add, clamped SwiGLU.
//   embed:  out[t, :] = table[tokens[t], :]
//   add:    out = a + b
//   swiglu: out = silu(min(gate, L)) * clamp(up, -L, L)      (L = swiglu_limit > 0, checked; +inf, the
//           default, is no clamp; a config's swiglu_limit <= 0 or absent means +inf)
#pragma once

#include <limits>

#include "ops/op_common.h"

namespace di::ops {

struct EmbedArgs {
    TensorView tokens;  // i32 [n]
    TensorView table;   // f32|bf16|f16 [vocab_size, hidden_dim]
    TensorView out;     // f32 [n, hidden_dim]
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, tokens, Role::kIn);
        DI_VISIT(f, table, Role::kIn);
        DI_VISIT(f, out, Role::kOut);
    }
};
void check(const EmbedArgs& a);

struct AddArgs {
    TensorView a;    // f32 [n, d]
    TensorView b;    // f32 [n, d]
    TensorView out;  // f32 [n, d] (may alias a or b)
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, a, Role::kIn);
        DI_VISIT(f, b, Role::kIn);
        DI_VISIT(f, out, Role::kOut);
    }
};
void check(const AddArgs& a);

struct SwigluArgs {
    TensorView gate;                                       // f32 [n, moe_dim]
    TensorView up;                                         // f32 [n, moe_dim]
    TensorView out;                                        // f32 [n, moe_dim]
    float limit = std::numeric_limits<float>::infinity();  // swiglu_limit: > 0 (elementwise.h)
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, gate, Role::kIn);
        DI_VISIT(f, up, Role::kIn);
        DI_VISIT(f, out, Role::kOut);
    }
};
void check(const SwigluArgs& a);

}  // namespace di::ops
