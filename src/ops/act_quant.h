// Activation quantisation for FP8 GEMMs, as DeepSeek's inference code runs the released checkpoints
// (act_quant with UE8M0 scales): each row's 128-column blocks share one power-of-two scale
//   s = 2^ceil(log2(max(amax, 1e-4) / 448)),   q = e4m3_rne(clamp(x / s, -448, 448)),
// and the GEMM reads q * s. A power-of-two s makes x / s and q * s exact, so every backend that follows these
// steps gets the same q and s bit for bit (the CUDA kernel in ops/cuda/act_quant.cu mirrors them).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/op_common.h"

namespace di::ops {

inline constexpr int64_t kActBlock = 128;
inline constexpr float kFp8Max = 448.0f;
inline constexpr float kActAmaxFloor = 1e-4f;

// 2^ceil(log2(v)) for a positive normal v: the exponent, plus one unless the mantissa is zero.
inline float pow2_ceil(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    if (u & 0x007fffffu) u = (u & 0x7f800000u) + 0x00800000u;
    std::memcpy(&v, &u, 4);
    return v;
}

inline float act_block_scale(float amax) { return pow2_ceil(std::max(amax, kActAmaxFloor) / kFp8Max); }

// out[i] = q[i] * s for one row of `n` values (n a multiple of 128); out may alias x.
inline void fp8_block_quant_dequant_row(const float* x, int64_t n, float* out) {
    for (int64_t b = 0; b < n; b += kActBlock) {
        float amax = 0.0f;
        for (int64_t i = b; i < b + kActBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float s = act_block_scale(amax);
        for (int64_t i = b; i < b + kActBlock; ++i)
            out[i] = round_to_fp8_e4m3(std::min(std::max(x[i] / s, -kFp8Max), kFp8Max)) * s;
    }
}

// x [n, in] (any row stride) quantised and dequantised into `store`; returns an f32 view of it. For the
// backends that run the product on f32 values (ref, cpu, the CUDA GEMVs).
TensorView fp8_block_quant_dequant(const TensorView& x, std::vector<float>& store);

// The quantiser as an op (Backend::act_quant): a producer's f32 rows quantised once, by the steps above, for
// the linears that read them (LinearArgs' pre-quantised x): the codes and each 128-column block's scale.
struct ActQuantArgs {
    TensorView x;       // f32 [n, in], unit last stride, in a multiple of 128
    TensorView q;       // e4m3 [n, in], unit last stride
    TensorView scales;  // f32 [n, in / 128], any strides
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, x, Role::kIn);
        DI_VISIT(f, q, Role::kOut);
        DI_VISIT(f, scales, Role::kOut);
    }
};
void check(const ActQuantArgs& a);
// act_quant in host memory.
void fp8_block_quant(const ActQuantArgs& a);
// Pre-quantised rows (e4m3 q [n, in] and their block scales [n, in / 128]) as f32 values q * s in `store`:
// the quantiser's dequantised rows, bit for bit. Returns an f32 view of them.
TensorView fp8_block_dequant(const TensorView& q, const TensorView& scales, std::vector<float>& store);

}  // namespace di::ops
