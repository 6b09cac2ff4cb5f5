// FP8 GEMMs of the native precision: activations quantised per 128-column block (ops/act_quant.h, bit for
// bit) and the product on Hopper's FP8 tensor cores through cuBLASLt's block-scaled FP8 matmul (weights with
// their 128x128 block scales, activations with 1x128 scales). Device code and host code share this header,
// so it holds plain types only (see kernels.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/cuda/kernels.h"

namespace di::cuda {

// x [n, in] (row stride ldx, in % 128 == 0) -> q [n, in] e4m3 bytes (row stride in) and scales
// sx [in / 128][n] (the K-block-major layout cuBLASLt's VEC128 scales take).
void launch_act_quant_fp8(const float* x, int64_t ldx, int64_t n, int64_t in, uint8_t* q, float* sx, Stream s);
// The same values dequantised (q * s) into out [n, in] (row stride in): the input of the f32 kernels.
void launch_act_quant_dequant(const float* x, int64_t ldx, int64_t n, int64_t in, float* out, Stream s);
// An fp8 weight's block scales as f32 [rows][cols] contiguous, from e8m0 bytes or f32 (row stride ld).
void launch_scales_to_f32(const void* scale, bool e8m0, int64_t ld, int64_t rows, int64_t cols, float* out,
                          Stream s);
// y [n, out] f32 (row stride ldy) <- bf16 [n, out] contiguous.
void launch_bf16_rows_to_f32(const uint16_t* src, int64_t n, int64_t out, float* y, int64_t ldy, Stream s);

// cuBLASLt, loaded at run time (the binary needs no CUDA library but the driver). One per process.
class LtFp8Gemm {
public:
    // nullptr when libcublasLt cannot be loaded; `why` then says why.
    static LtFp8Gemm* instance(const char** why = nullptr);
    // y[n, out] (f32, row stride ldy) = (q * sx) . (w * sw)^T, w e4m3 [out, in] with row stride ldw, sw f32
    // [out / 128][in / 128]. out and in multiples of 128. False if cuBLASLt has no algorithm for the shape;
    // bf16_out: the algorithm writes bf16 (into `tmp`, n * out * 2 bytes) that is widened into y.
    bool run(const uint8_t* q, const float* sx, const void* w, int64_t ldw, const float* sw, int64_t n, int64_t in,
             int64_t out, float* y, int64_t ldy, void* tmp, Stream s);
    // Whether the shape has an algorithm, and whether it writes f32 (else bf16, widened); `note`: what the
    // heuristic answered (valid while this object lives).
    bool supports(int64_t n, int64_t in, int64_t out, int64_t ldw, int64_t ldy, bool* f32_out = nullptr,
                  const char** note = nullptr);

private:
    struct Impl;
    explicit LtFp8Gemm(Impl* impl) : impl_(impl) {}
    Impl* impl_;
};

}  // namespace di::cuda
