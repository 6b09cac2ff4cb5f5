// The split of f32 activations into three bf16 pieces and the sum of their products (bf16_gemm.h).
#include <cuda_bf16.h>

#include "ops/cuda/bf16_gemm.h"
#include "ops/cuda/device_util.cuh"

namespace di::cuda {
namespace {

__global__ void bf16x3_split_kernel(const float* x, int64_t ldx, int64_t n, int64_t in, uint16_t* pieces) {
    allow_early_next();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n * in) return;
    const int64_t r = i / in, c = i % in;
    const float v = x[r * ldx + c];
    uint16_t hi, mid = 0, lo = 0;
    if (isfinite(v)) {  // truncations: v - hi and rest - mid are exact, so hi + mid + lo == v
        const uint32_t b = __float_as_uint(v);
        hi = uint16_t(b >> 16);
        const float rest = v - __uint_as_float(b & 0xffff0000u);
        const uint32_t rb = __float_as_uint(rest);
        mid = uint16_t(rb >> 16);
        lo = __bfloat16_as_ushort(__float2bfloat16_rn(rest - __uint_as_float(rb & 0xffff0000u)));
    } else {  // inf keeps its sign, every NaN one quiet NaN (truncating a NaN could make it inf)
        hi = isnan(v) ? uint16_t(0x7fc0) : uint16_t(__float_as_uint(v) >> 16);
    }
    const int64_t plane = n * in;
    pieces[i] = hi, pieces[plane + i] = mid, pieces[2 * plane + i] = lo;
}

__global__ void bf16x3_sum_kernel(const float* d, int64_t n, int64_t out, float* y, int64_t ldy) {
    allow_early_next();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n * out) return;
    const int64_t plane = n * out;
    y[(i / out) * ldy + i % out] = (d[2 * plane + i] + d[plane + i]) + d[i];
}

}  // namespace

void launch_bf16x3_split(const float* x, int64_t ldx, int64_t n, int64_t in, uint16_t* pieces, Stream s) {
    if (n * in == 0) return;
    bf16x3_split_kernel<<<blocks_for(n * in, 256), 256, 0, as_stream(s)>>>(x, ldx, n, in, pieces);
}

void launch_bf16x3_sum(const float* d, int64_t n, int64_t out, float* y, int64_t ldy, Stream s) {
    if (n * out == 0) return;
    bf16x3_sum_kernel<<<blocks_for(n * out, 256), 256, 0, as_stream(s)>>>(d, n, out, y, ldy);
}

}  // namespace di::cuda
