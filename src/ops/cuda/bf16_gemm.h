// BF16 weights on the tensor cores without giving up f32 activations (the `exact` precision): each f32 x is
// split into three bf16 pieces, hi (x's top 8 significant bits, by truncation), mid (the next 8) and lo (the
// rest), whose sum is x bit for bit (unless lo falls below bf16's smallest subnormal, 2^-133); the 3n piece
// rows go through one cuBLASLt BF16 GEMM with f32 accumulation, where each bf16 weight times a bf16 piece
// is exact in f32, and y = (lo . W + mid . W) + hi . W. The weights are read once for all 3n rows. Device
// code and host code share this header, so it holds plain types only (see kernels.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/cuda/kernels.h"

namespace di::cuda {

// x [n, in] f32 (row stride ldx) -> pieces [3][n][in] bf16 bits: hi rows, then mid rows, then lo rows.
void launch_bf16x3_split(const float* x, int64_t ldx, int64_t n, int64_t in, uint16_t* pieces, Stream s);
// d [3][n][out] f32 (the GEMM of the pieces) -> y [n, out] (row stride ldy) = (lo + mid) + hi.
void launch_bf16x3_sum(const float* d, int64_t n, int64_t out, float* y, int64_t ldy, Stream s);

// Whether linears() splits x once for its cublaslt_bf16x3 jobs on the same x (LtBf16x3Gemm's several-weights
// run): on by default (H100, 4 V4-Flash layers: the 4K prefill +1.6%; docs/benchmarks.md 2026-12-07, eighth
// session), DEEPINFER_BF16X3_SHARE=0 each job alone; the setter is for the tests.
void set_bf16x3_share(bool on);
bool bf16x3_share();

class LtBf16x3Gemm {
  public:
    // nullptr when libcublasLt cannot be loaded; `why` then says why.
    static LtBf16x3Gemm* instance(const char** why = nullptr);
    // Rows of x per GEMM (larger n runs in chunks of this many), so the temporaries stay within 256 MB.
    static int64_t chunk_rows(int64_t out);
    // Bytes of `tmp` that run() needs for n rows.
    static size_t tmp_bytes(int64_t n, int64_t in, int64_t out);
    // Whether the shape has an algorithm: w bf16 [out, in] with row stride ldw (elements), 256-byte aligned.
    bool supports(int64_t n, int64_t in, int64_t out, const void* w, int64_t ldw);
    // y[n, out] (f32, row stride ldy) = x . W^T as above; false if cuBLASLt fails or has no algorithm.
    bool run(const float* x, int64_t ldx, const void* w, int64_t ldw, int64_t n, int64_t in, int64_t out,
             float* y, int64_t ldy, void* tmp, Stream s);

    // Several weights on the same x (a compressor's wkv and wgate, the indexer's): x split once a chunk of
    // rows (chunk_rows of the largest out), then each weight's GEMM and sum; each y as run() gives it where
    // its rows go in the same chunks (n within every chunk, or equal chunks).
    struct Out {
        const void* w;
        int64_t ldw, out;
        float* y;
        int64_t ldy;
    };
    static size_t tmp_bytes(int64_t n, int64_t in, const Out* outs, size_t count);
    bool supports(int64_t n, int64_t in, const Out* outs, size_t count);
    bool run(const float* x, int64_t ldx, int64_t n, int64_t in, const Out* outs, size_t count, void* tmp,
             Stream s);

  private:
    struct Impl;
    explicit LtBf16x3Gemm(Impl* impl) : impl_(impl) {}
    Impl* impl_;
};

}  // namespace di::cuda
