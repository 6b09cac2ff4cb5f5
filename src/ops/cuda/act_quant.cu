// FP8 activation quantisation on the GPU: the steps of ops/act_quant.h, bit for bit (IEEE division by the
// power-of-two scale, round-to-nearest-even e4m3 with saturation). A warp takes 1-4 128-column blocks of a
// row.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstdlib>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/kernels.h"

namespace di::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// A warp quantises kG consecutive 128-column blocks of a row. kVec (x, its rows and the outputs 16-byte
// aligned): lane l holds columns 4l .. 4l + 3 of each block (one 16-byte load a block, all kG in flight
// before the first reduction; the same maximum, so the same scale and codes), writing them as one word (q)
// or one 16-byte store (out). Otherwise scalar loads (rows may be strided slices), one block a warp. (H100,
// 4,096 x 4,096: 31.1 us with a block a warp by scalar loads, 29.95 with four: near the copy rate either
// way.)
template <bool kDequant, int kG, bool kVec>
__global__ void act_quant_kernel(const float* __restrict__ x, int64_t ldx, int64_t n, int64_t in,
                                 uint8_t* __restrict__ q, float* __restrict__ sx, int64_t ld_sx,
                                 float* __restrict__ out) {
    allow_early_next();
    const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    const int64_t units = in / (128 * kG);
    if (warp >= n * units) return;
    const int64_t r = warp / units, kb0 = (warp % units) * kG;
    float v[kG][4];
#pragma unroll
    for (int g = 0; g < kG; ++g) {
        const float* src = x + r * ldx + (kb0 + g) * 128;
        if constexpr (kVec) {
            const float4 f = *reinterpret_cast<const float4*>(src + 4 * lane);
            v[g][0] = f.x, v[g][1] = f.y, v[g][2] = f.z, v[g][3] = f.w;
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) v[g][i] = src[lane + 32 * i];
        }
    }
#pragma unroll
    for (int g = 0; g < kG; ++g) {
        const int64_t kb = kb0 + g;
        const float s = act_quant_scale(warp_block_amax(v[g]));
        if constexpr (kVec) {
            const int64_t col = kb * 128 + 4 * lane;
            if constexpr (kDequant) {
                *reinterpret_cast<float4*>(out + r * in + col) =
                    make_float4(act_quant_round_trip(v[g][0], s), act_quant_round_trip(v[g][1], s),
                                act_quant_round_trip(v[g][2], s), act_quant_round_trip(v[g][3], s));
            } else {
                uint32_t word = 0;
#pragma unroll
                for (int i = 0; i < 4; ++i) word |= uint32_t(act_quant_e4m3(v[g][i], s).__x) << (8 * i);
                *reinterpret_cast<uint32_t*>(q + r * in + col) = word;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int64_t col = kb * 128 + lane + 32 * i;
                if constexpr (kDequant)
                    out[r * in + col] = act_quant_round_trip(v[g][i], s);
                else
                    q[r * in + col] = act_quant_e4m3(v[g][i], s).__x;
            }
        }
        if constexpr (!kDequant)
            if (lane == 0) sx[kb * ld_sx + r] = s;
    }
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

__global__ void fp8_rows_to_f32_kernel(const uint8_t* q, int64_t ldq, const float* s, int64_t s0, int64_t s1,
                                       int64_t n, int64_t in, float* out, int64_t ldo) {
    allow_early_next();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n * in) return;
    const int64_t r = i / in, c = i % in;
    __nv_fp8_e4m3 v;
    v.__x = q[r * ldq + c];
    out[r * ldo + c] = float(v) * s[r * s0 + (c / 128) * s1];
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

namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Four blocks a warp on aligned rows whose block count allows it (two, then one, otherwise).
template <bool kDequant>
void launch_act_quant(const float* x, int64_t ldx, int64_t n, int64_t in, uint8_t* q, float* sx,
                      int64_t ld_sx, float* out, cudaStream_t s) {
    const int64_t blocks = in / 128;
    const bool vec = ldx % 4 == 0 && aligned16(x) && aligned16(kDequant ? static_cast<void*>(out) : q);
    auto go = [&](auto kernel, int g) {
        kernel<<<grid_for(n * (blocks / g), kWarpsPerBlock), 32 * kWarpsPerBlock, 0, s>>>(x, ldx, n, in, q,
                                                                                          sx, ld_sx, out);
    };
    if (!vec)
        go(act_quant_kernel<kDequant, 1, false>, 1);
    else if (blocks % 4 == 0)
        go(act_quant_kernel<kDequant, 4, true>, 4);
    else if (blocks % 2 == 0)
        go(act_quant_kernel<kDequant, 2, true>, 2);
    else
        go(act_quant_kernel<kDequant, 1, true>, 1);
}
}  // namespace

void launch_act_quant_fp8(const float* x, int64_t ldx, int64_t n, int64_t in, uint8_t* q, float* sx,
                          int64_t ld_sx, Stream s) {
    if (n == 0) return;
    launch_act_quant<false>(x, ldx, n, in, q, sx, ld_sx, nullptr, static_cast<cudaStream_t>(s));
}

void launch_act_quant_dequant(const float* x, int64_t ldx, int64_t n, int64_t in, float* out, Stream s) {
    if (n == 0) return;
    launch_act_quant<true>(x, ldx, n, in, nullptr, nullptr, 0, out, static_cast<cudaStream_t>(s));
}

void launch_scales_to_f32(const void* scale, bool e8m0, int64_t ld, int64_t rows, int64_t cols, float* out,
                          int64_t ld_out, Stream s) {
    if (rows * cols == 0) return;
    scales_to_f32_kernel<<<grid_for(rows * cols, 256), 256, 0, static_cast<cudaStream_t>(s)>>>(
        scale, e8m0, ld, rows, cols, out, ld_out);
}

void launch_fp8_rows_to_f32(const uint8_t* q, int64_t ldq, const float* s, int64_t s0, int64_t s1, int64_t n,
                            int64_t in, float* out, int64_t ldo, Stream st) {
    if (n * in == 0) return;
    fp8_rows_to_f32_kernel<<<grid_for(n * in, 256), 256, 0, static_cast<cudaStream_t>(st)>>>(
        q, ldq, s, s0, s1, n, in, out, ldo);
}

void launch_bf16_rows_to_f32(const uint16_t* src, int64_t n, int64_t out, float* y, int64_t ldy, Stream s) {
    if (n * out == 0) return;
    bf16_rows_to_f32_kernel<<<grid_for(n * out, 256), 256, 0, static_cast<cudaStream_t>(s)>>>(
        reinterpret_cast<const __nv_bfloat16*>(src), n, out, y, ldy);
}

}  // namespace di::cuda
