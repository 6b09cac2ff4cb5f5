// The split of f32 activations into three bf16 pieces and the sum of their products (bf16_gemm.h).
#include <cuda_bf16.h>

#include "ops/cuda/bf16_gemm.h"
#include "ops/cuda/device_util.cuh"

namespace di::cuda {
namespace {

// v as hi + mid + lo bf16 pieces: truncations, so v - hi and rest - mid are exact and hi + mid + lo == v;
// inf keeps its sign, every NaN becomes one quiet NaN (truncating a NaN could make it inf).
__device__ __forceinline__ void split3(float v, uint16_t& hi, uint16_t& mid, uint16_t& lo) {
    mid = 0, lo = 0;
    if (isfinite(v)) {
        const uint32_t b = __float_as_uint(v);
        hi = uint16_t(b >> 16);
        const float rest = v - __uint_as_float(b & 0xffff0000u);
        const uint32_t rb = __float_as_uint(rest);
        mid = uint16_t(rb >> 16);
        lo = __bfloat16_as_ushort(__float2bfloat16_rn(rest - __uint_as_float(rb & 0xffff0000u)));
    } else {
        hi = isnan(v) ? uint16_t(0x7fc0) : uint16_t(__float_as_uint(v) >> 16);
    }
}

__global__ void bf16x3_split_kernel(const float* x, int64_t ldx, int64_t n, int64_t in, uint16_t* pieces) {
    allow_early_next();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n * in) return;
    const int64_t r = i / in, c = i % in, plane = n * in;
    uint16_t hi, mid, lo;
    split3(x[r * ldx + c], hi, mid, lo);
    pieces[i] = hi, pieces[plane + i] = mid, pieces[2 * plane + i] = lo;
}

// Four columns a thread, block row blockIdx.x (in % 4 == 0, x's rows 16-byte aligned): one float4 load and
// one 8-byte store a piece, no 64-bit division an element (the scalar kernel ran at ~1.6 TB/s).
__global__ void bf16x3_split4_kernel(const float* x, int64_t ldx, int64_t n, int64_t in, uint16_t* pieces) {
    allow_early_next();
    const int64_t r = blockIdx.x, c = (int64_t(blockIdx.y) * blockDim.x + threadIdx.x) * 4;
    if (c >= in) return;
    const float4 v = *reinterpret_cast<const float4*>(x + r * ldx + c);
    ushort4 hi, mid, lo;
    split3(v.x, hi.x, mid.x, lo.x);
    split3(v.y, hi.y, mid.y, lo.y);
    split3(v.z, hi.z, mid.z, lo.z);
    split3(v.w, hi.w, mid.w, lo.w);
    const int64_t i = r * in + c, plane = n * in;
    *reinterpret_cast<ushort4*>(pieces + i) = hi;
    *reinterpret_cast<ushort4*>(pieces + plane + i) = mid;
    *reinterpret_cast<ushort4*>(pieces + 2 * plane + i) = lo;
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
    if (in % 4 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(pieces) % 8 == 0 && in / 4 <= 256 * 65535)
        bf16x3_split4_kernel<<<dim3(unsigned(n), blocks_for(in / 4, 256)), 256, 0, as_stream(s)>>>(
            x, ldx, n, in, pieces);
    else
        bf16x3_split_kernel<<<blocks_for(n * in, 256), 256, 0, as_stream(s)>>>(x, ldx, n, in, pieces);
}

void launch_bf16x3_sum(const float* d, int64_t n, int64_t out, float* y, int64_t ldy, Stream s) {
    if (n * out == 0) return;
    bf16x3_sum_kernel<<<blocks_for(n * out, 256), 256, 0, as_stream(s)>>>(d, n, out, y, ldy);
}

}  // namespace di::cuda
