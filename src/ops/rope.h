// Interleaved partial RoPE on the trailing rope_dim channels of each head, in place.
// c0 = head_dim - rope_dim; for pair i: (u, v) = (x[c0+2i], x[c0+2i+1]), a = f32(pos) * inv_freq[i],
//   cos = cos(a) * mscale, sin = sin(a) * mscale,
//   forward: u' = u cos - v sin, v' = v cos + u sin;   inverse: the same with sin -> -sin.
#pragma once

#include "ops/op_common.h"

namespace di::ops {

struct RopeArgs {
    TensorView x;          // f32 [n, n_heads, head_dim], rotated in place
    TensorView positions;  // i32 [n] absolute positions
    TensorView inv_freq;   // f32 [rope_dim / 2]
    float mscale = 1.0f;   // YaRN magnitude (attention_factor); 1 for plain RoPE
    bool inverse = false;
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, x, Role::kInOut);
        DI_VISIT(f, positions, Role::kIn);
        DI_VISIT(f, inv_freq, Role::kIn);
    }
};
void check(const RopeArgs& a);

}  // namespace di::ops
