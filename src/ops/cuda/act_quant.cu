// FP8 activation quantisation on the GPU: the steps of ops/act_quant.h, bit for bit (IEEE division by the
// power-of-two scale, round-to-nearest-even e4m3 with saturation). One warp per 128-column block.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdlib>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/kernels.h"

namespace di::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

template <bool kDequant>
__global__ void act_quant_kernel(const float* __restrict__ x, int64_t ldx, int64_t n, int64_t in,
                                 uint8_t* __restrict__ q, float* __restrict__ sx, int64_t ld_sx,
                                 float* __restrict__ out) {
    allow_early_next();
    const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    const int64_t blocks = in / 128;
    if (warp >= n * blocks) return;
    const int64_t r = warp / blocks, kb = warp % blocks;
    const float* src = x + r * ldx + kb * 128;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = src[lane + 32 * i];  // rows may be strided slices: no vector loads
    const float s = act_quant_scale(warp_block_amax(v));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t col = kb * 128 + lane + 32 * i;
        if constexpr (kDequant)
            out[r * in + col] = act_quant_round_trip(v[i], s);
        else
            q[r * in + col] = act_quant_e4m3(v[i], s).__x;
    }
    if constexpr (!kDequant)
        if (lane == 0) sx[kb * ld_sx + r] = s;
}

__global__ void scales_to_f32_kernel(const void* scale, bool e8m0, int64_t ld, int64_t rows, int64_t cols,
                                     float* out, int64_t ld_out) {
    allow_early_next();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    const int64_t r = i / cols, c = i % cols;
    if (e8m0) {
        out[r * ld_out + c] = e8m0_to_f(static_cast<const uint8_t*>(scale)[r * ld + c]);
    } else {
        out[r * ld_out + c] = static_cast<const float*>(scale)[r * ld + c];
    }
}

__global__ void bf16_rows_to_f32_kernel(const __nv_bfloat16* src, int64_t n, int64_t out, float* y,
                                        int64_t ldy) {
    allow_early_next();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n * out) return;
    y[(i / out) * ldy + i % out] = __bfloat162float(src[i]);
}

unsigned grid_for(int64_t items, int per_block) { return unsigned((items + per_block - 1) / per_block); }

}  // namespace

namespace {
bool in_kernels = std::getenv("DEEPINFER_QUANT_IN_KERNELS") != nullptr;
}  // namespace

void set_act_quant_in_kernels(bool on) { in_kernels = on; }
bool act_quant_in_kernels() { return in_kernels; }

void launch_act_quant_fp8(const float* x, int64_t ldx, int64_t n, int64_t in, uint8_t* q, float* sx,
                          int64_t ld_sx, Stream s) {
    if (n == 0) return;
    act_quant_kernel<false>
        <<<grid_for(n * (in / 128), kWarpsPerBlock), 32 * kWarpsPerBlock, 0, static_cast<cudaStream_t>(s)>>>(
            x, ldx, n, in, q, sx, ld_sx, nullptr);
}

void launch_act_quant_dequant(const float* x, int64_t ldx, int64_t n, int64_t in, float* out, Stream s) {
    if (n == 0) return;
    act_quant_kernel<true>
        <<<grid_for(n * (in / 128), kWarpsPerBlock), 32 * kWarpsPerBlock, 0, static_cast<cudaStream_t>(s)>>>(
            x, ldx, n, in, nullptr, nullptr, 0, out);
}

void launch_scales_to_f32(const void* scale, bool e8m0, int64_t ld, int64_t rows, int64_t cols, float* out,
                          int64_t ld_out, Stream s) {
    if (rows * cols == 0) return;
    scales_to_f32_kernel<<<grid_for(rows * cols, 256), 256, 0, static_cast<cudaStream_t>(s)>>>(
        scale, e8m0, ld, rows, cols, out, ld_out);
}

void launch_bf16_rows_to_f32(const uint16_t* src, int64_t n, int64_t out, float* y, int64_t ldy, Stream s) {
    if (n * out == 0) return;
    bf16_rows_to_f32_kernel<<<grid_for(n * out, 256), 256, 0, static_cast<cudaStream_t>(s)>>>(
        reinterpret_cast<const __nv_bfloat16*>(src), n, out, y, ldy);
}

}  // namespace di::cuda
