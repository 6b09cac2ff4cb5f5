// Linear layers and quantised weight formats.  y[n, o] = sum_i x[n, i] * W[o, i]  (no bias in V4).
// W is read in its checkpoint format and dequantised inside the op:
//   fp8 block:  W[o, i] = fp8(q[o, i]) * scale[o / 128, i / 128]   (scale e8m0 or f32)
//   fp4 group:  W[o, i] = fp4(q[o, i]) * scale[o, i / 32]          (two values per byte, low nibble first)
#pragma once

#include <functional>
#include <span>
#include <string_view>

#include "ops/op_common.h"

namespace di::ops {

enum class WeightFormat : uint8_t { kDense, kFp8Block, kFp4Group };

inline constexpr int64_t kFp8Block = 128;
inline constexpr int64_t kFp4Group = 32;

struct QWeight {
    WeightFormat format = WeightFormat::kDense;
    TensorView data;   // dense f32|bf16|f16 [out, in]; fp8 f8_e4m3 [out, in]; fp4 fp4x2 [out, in/2]
    TensorView scale;  // fp8 e8m0|f32 [ceil(out/128), ceil(in/128)]; fp4 e8m0|f32 [out, in/32]; dense: empty
    int64_t out_dim = 0;
    int64_t in_dim = 0;

    bool empty() const { return data.empty(); }
    // Output rows [begin, begin + n); fp8 needs begin and n on 128-row block boundaries (or n reaching the
    // end).
    QWeight rows(int64_t begin, int64_t n) const;
    // Dequantised element, f32 (reference path and tests).
    float at(int64_t o, int64_t i) const;
};
// "fp8", "fp4", or the dense dtype's name (reports: screen's shapes, the profile's rows).
std::string_view weight_format_name(const QWeight& w);

// How x enters the product. kNone: as given (the `exact` precision). kFp8Block128: quantised per row and
// 128-column block to e4m3 with a power-of-two scale (ops/act_quant.h), the `native` precision of FP8
// weights; needs in_dim a multiple of 128.
enum class ActQuant : uint8_t { kNone, kFp8Block128 };

struct LinearArgs {
    // f32 [n, in], unit last stride, any row stride; or, with act kFp8Block128, x already quantised: e4m3
    // codes [n, in] (unit last stride) whose 128-column block b of row r is scaled by x_scales[r][b] (what
    // the quantiser makes of the f32 rows, so a backend skips its own: ActQuantArgs)
    TensorView x;
    QWeight w;  // [out, in]
    // f32 [n, out], unit last stride, any row stride; or bf16: the f32 result rounded to nearest even (the
    // native precision's q, as DeepSeek's inference code stores it)
    TensorView y;
    ActQuant act = ActQuant::kNone;
    // The rows' sequences, when the caller knows them: the sizes of consecutive row groups, summing to x's
    // rows (empty: one group). A backend may pick a kernel per group by the group's size, never by the
    // batch's, so a sequence's rows do not depend on what else is in the batch.
    std::span<const int64_t> row_groups{};
    TensorView x_scales{};  // f32 [n, in / 128], any strides: with e4m3 x only
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, x, Role::kIn);
        DI_VISIT(f, x_scales, Role::kIn);
        DI_VISIT(f, y, Role::kOut);
    }
};
void check(const LinearArgs& a);
// For the host backends: a linear with a bf16 y run as `f32_linear` on the same call into a host f32 buffer,
// then rounded into y. False (nothing run) where y is f32.
bool linear_via_f32(const LinearArgs& a, const std::function<void(const LinearArgs&)>& f32_linear);
void check_row_groups(std::span<const int64_t> groups, int64_t rows, const char* op);

}  // namespace di::ops
