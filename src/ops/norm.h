// RMSNorm: y = x * (mean(x^2) + eps)^-1/2 * w   (w optional: the per-head q norm has none).
#pragma once

#include "ops/op_common.h"

namespace di::ops {

struct RmsNormArgs {
    TensorView x;       // f32 [n, d], unit last stride
    TensorView weight;  // f32|bf16|f16 [d], or empty for the unweighted norm
    TensorView y;       // f32 [n, d] (may alias x)
    float eps = 1e-6f;
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, x, Role::kIn);
        DI_VISIT(f, weight, Role::kIn);
        DI_VISIT(f, y, Role::kOut);
    }
};
void check(const RmsNormArgs& a);

}  // namespace di::ops
