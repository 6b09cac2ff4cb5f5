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
// sx [in / 128][ld_sx] (the K-block-major layout cuBLASLt's VEC128 scales take; ld_sx >= n).
void launch_act_quant_fp8(const float* x, int64_t ldx, int64_t n, int64_t in, uint8_t* q, float* sx,
                          int64_t ld_sx, Stream s);
// The same values dequantised (q * s) into out [n, in] (row stride in): the input of the f32 kernels.
void launch_act_quant_dequant(const float* x, int64_t ldx, int64_t n, int64_t in, float* out, Stream s);
// An fp8 weight's block scales as f32 [rows][cols] with row stride ld_out, from e8m0 bytes or f32 (row
// stride ld).
void launch_scales_to_f32(const void* scale, bool e8m0, int64_t ld, int64_t rows, int64_t cols, float* out,
                          int64_t ld_out, Stream s);
// Pre-quantised rows back in f32: out[r][c] = q[r][c] (e4m3, row stride ldq) * s[r * s0 + (c / 128) * s1]
// (row stride ldo): the quantiser's dequantised values, bit for bit.
void launch_fp8_rows_to_f32(const uint8_t* q, int64_t ldq, const float* s, int64_t s0, int64_t s1, int64_t n,
                            int64_t in, float* out, int64_t ldo, Stream st);
// y [n, out] f32 (row stride ldy) <- bf16 [n, out] contiguous.
void launch_bf16_rows_to_f32(const uint16_t* src, int64_t n, int64_t out, float* y, int64_t ldy, Stream s);

// cuBLASLt, loaded at run time (the binary needs no CUDA library but the driver). One per process.
// Its scale tensors need rows of a multiple of 16 bytes (H200, CUDA 13.0: no algorithm for 15, 19, 33 or
// 37 activation rows; wrong results for weight scales of 2 or 3 blocks per row stored densely), so the GEMM
// runs on lt_rows(n) rows (q and sx hold that many, the rows past n zero; D goes through a temporary when
// n is not a multiple of 4), and the weight scales have a row stride of lt_scale_ld(in / 128).
inline int64_t lt_rows(int64_t n) { return (n + 3) / 4 * 4; }
inline int64_t lt_scale_ld(int64_t k_blocks) { return (k_blocks + 3) / 4 * 4; }

class LtFp8Gemm {
  public:
    // nullptr when libcublasLt cannot be loaded; `why` then says why.
    static LtFp8Gemm* instance(const char** why = nullptr);
    // y[n, out] (f32, row stride ldy) = (q * sx) . (w * sw)^T, q [lt_rows(n), in] with row stride ldq (0:
    // in; a multiple of 16: q may be columns of a wider quantised input), sx [in / 128][lt_rows(n)],
    // w e4m3 [out, in] with row stride ldw, sw f32 [out / 128][in / 128] with row stride
    // lt_scale_ld(in / 128); out and in multiples of 128. False if cuBLASLt has no algorithm for the shape.
    // `tmp` (lt_rows(n) * out * 4 bytes) takes D when it cannot go to y directly (padded rows, or an
    // algorithm that writes bf16, widened into y).
    bool run(const uint8_t* q, const float* sx, const void* w, int64_t ldw, const float* sw, int64_t n,
             int64_t in, int64_t out, float* y, int64_t ldy, void* tmp, Stream s, int64_t ldq = 0);
    // run() with y bf16 [n, out] (row stride ldy, a multiple of 8): cuBLASLt's D in bf16, rounded by its
    // epilogue from the f32 sums; `tmp` (lt_rows(n) * out * 2 bytes) takes D where n is not a multiple of 4.
    bool run_bf16(const uint8_t* q, const float* sx, const void* w, int64_t ldw, const float* sw, int64_t n,
                  int64_t in, int64_t out, uint16_t* y, int64_t ldy, void* tmp, Stream s, int64_t ldq = 0);
    bool supports_bf16(int64_t n, int64_t in, int64_t out, int64_t ldw, int64_t ldy, int64_t ldq = 0);
    // Whether the shape has an algorithm, and whether it writes f32 (else bf16, widened); `note`: what the
    // heuristic answered (valid while this object lives).
    bool supports(int64_t n, int64_t in, int64_t out, int64_t ldw, int64_t ldy, bool* f32_out = nullptr,
                  const char** note = nullptr, int64_t ldq = 0);

  private:
    struct Impl;
    explicit LtFp8Gemm(Impl* impl) : impl_(impl) {}
    Impl* impl_;
};

}  // namespace di::cuda
