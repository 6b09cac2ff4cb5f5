// Small element-wise ops: embedding gather, add, clamped SwiGLU, and the greedy pick of logits rows.
//   embed:  out[t, :] = table[tokens[t], :]
//   add:    out = a + b
//   swiglu: out = silu(min(gate, L)) * clamp(up, -L, L)      (L = swiglu_limit > 0, checked; +inf, the
//           default, is no clamp; a config's swiglu_limit <= 0 or absent means +inf)
//   argmax: ids[r] = the first index of row r's largest finite value, 0 if it has none (the sampler's
//           greedy rule), bad[r] = the index of its first NaN or infinite value, or -1 (a row with one gives
//           no token: the caller stops with an error)
#pragma once

#include <limits>

#include "ops/op_common.h"

namespace di::ops {

struct EmbedArgs {
    TensorView tokens;  // i32 [n]
    TensorView table;   // f32|bf16|f16 [vocab_size, hidden_dim]
    TensorView out;     // f32|bf16 [n, hidden_dim] (bf16: the row rounded to nearest even)
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, tokens, Role::kIn);
        DI_VISIT(f, table, Role::kIn);
        DI_VISIT(f, out, Role::kOut);
    }
};
void check(const EmbedArgs& a);

// out = x in out's dtype: f32 <-> bf16 (to bf16 rounded to nearest even), or the same dtype copied.
struct CastArgs {
    TensorView x;    // f32|bf16 [n, d]
    TensorView out;  // f32|bf16 [n, d], must not overlap x
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, x, Role::kIn);
        DI_VISIT(f, out, Role::kOut);
    }
};
void check(const CastArgs& a);

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

struct ArgmaxArgs {
    TensorView x;    // f32 [n, V]
    TensorView ids;  // i32 [n]
    TensorView bad;  // i32 [n]
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, x, Role::kIn);
        DI_VISIT(f, ids, Role::kOut);
        DI_VISIT(f, bad, Role::kOut);
    }
};
void check(const ArgmaxArgs& a);
// One row on the host: {first index of the largest value, first non-finite index or -1}.
std::pair<int32_t, int32_t> argmax_row(const float* x, int64_t V);

}  // namespace di::ops
