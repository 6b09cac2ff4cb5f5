// Device helpers shared by the .cu files: launch checks, float loads, weight dequantisation, reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/early_launch.cuh"
#include "ops/cuda/kernels.h"

namespace di::cuda {

inline cudaStream_t as_stream(Stream s) { return static_cast<cudaStream_t>(s); }
inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

// The value a one-off check leaves in a device int that starts at 0: launch(flag, stream) runs the check's
// kernels; synchronises the stream (the expert tables' scale checks, once when a table is built).
template <class Launch>
int device_flag(Stream s, Launch launch) {
    const cudaStream_t st = as_stream(s);
    int* flag = nullptr;
    int host = 0;
    DI_CUDA_CHECK(cudaMallocAsync(&flag, sizeof(int), st));
    DI_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), st));
    launch(flag, st);
    DI_CUDA_CHECK(cudaMemcpyAsync(&host, flag, sizeof(int), cudaMemcpyDeviceToHost, st));
    DI_CUDA_CHECK(cudaFreeAsync(flag, st));
    DI_CUDA_CHECK(cudaStreamSynchronize(st));
    return host;
}

__device__ __forceinline__ float load_f(const void* p, Fdt t, int64_t i) {
    switch (t) {
        case Fdt::kF32:
            return static_cast<const float*>(p)[i];
        case Fdt::kBF16:
            return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
        default:
            return __half2float(static_cast<const __half*>(p)[i]);
    }
}

// fp8 e4m3 (OCP: no inf, 0x7f/0xff NaN) to f32, exact.
__device__ __forceinline__ float fp8_e4m3_to_f(uint8_t b) {
    const uint32_t sign = uint32_t(b >> 7) << 31, e = (b >> 3) & 0xF, m = b & 7;
    if (e == 0xF && m == 7) return __int_as_float(0x7fc00000);
    if (e == 0) return sign ? -float(m) * 0.001953125f : float(m) * 0.001953125f;  // m/8 * 2^-6
    return __int_as_float(int(sign | ((e + 120) << 23) | (m << 20)));
}

// The activation quantiser's power-of-two scale of a 128-element block (ops/act_quant.h): the smallest power
// of two >= max(amax, 1e-4) / 448, the division rounded to nearest.
__device__ __forceinline__ float act_quant_scale(float amax) {
    unsigned u = __float_as_uint(__fdiv_rn(fmaxf(amax, 1e-4f), 448.0f));
    if (u & 0x007fffffu) u = (u & 0x7f800000u) + 0x00800000u;
    return __uint_as_float(u);
}
// The max |x| of a 128-element block held by a warp, 4 values a lane (every lane gets it; fmaxf skips NaN):
// act_quant_scale's argument.
__device__ __forceinline__ float warp_block_amax(const float (&v)[4]) {
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) m = fmaxf(m, fabsf(v[i]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}
// 1 / s for act_quant_scale's s, exact: s is 2^e with e in [-22, 120] (2^-e a normal float) or +inf (0).
// v * act_quant_inv(s) is then v / s bit for bit (the same real number rounded once, subnormal results and
// overflow included; inf * 0 and inf / inf both NaN), at a multiply where IEEE division takes a sequence.
__device__ __forceinline__ float act_quant_inv(float s) {
    const unsigned u = __float_as_uint(s);
    return __uint_as_float(u == 0x7f800000u ? 0u : 0x7f000000u - u);
}
// The quantiser's e4m3 value of v under scale s: IEEE division by the power of two (as a multiply by its
// exact inverse), saturated at +-448 (NaN passes, as on the host), rounded to nearest even.
__device__ __forceinline__ __nv_fp8_e4m3 act_quant_e4m3(float v, float s) {
    float t = v * act_quant_inv(s);
    t = t > 448.0f ? 448.0f : t < -448.0f ? -448.0f : t;
    return __nv_fp8_e4m3(t);
}
// act_quant_e4m3 of a and b as the two bytes of one word (a's the low byte), in one conversion: cvt's
// satfinite saturates at +-448 and passes NaN, as the explicit clamp does, so the codes are the same.
__device__ __forceinline__ uint16_t act_quant_e4m3x2(float a, float b, float s) {
    const float inv = act_quant_inv(s);
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b * inv), "f"(a * inv));
    return r;
}
// v quantised and back (act_quant_dequant's value): what the native precision's products see of v.
__device__ __forceinline__ float act_quant_round_trip(float v, float s) {
    return float(act_quant_e4m3(v, s)) * s;
}

__device__ __forceinline__ float e8m0_to_f(uint8_t b) {
    return b == 255 ? __int_as_float(0x7fc00000)
                    : (b == 0 ? __int_as_float(0x00400000) : __int_as_float(int(b) << 23));
}

__device__ __forceinline__ float fp4_to_f(uint32_t nib) {
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float v = mag[nib & 7];
    return (nib & 8) ? -v : v;
}

__device__ __forceinline__ float weight_scale(const WeightRef& w, int64_t r, int64_t c) {
    const int64_t i = r * w.ld_scale + c;
    return w.scale_e8m0 ? e8m0_to_f(static_cast<const uint8_t*>(w.scale)[i])
                        : static_cast<const float*>(w.scale)[i];
}

// Dequantised W[o, i].
__device__ __forceinline__ float weight_at(const WeightRef& w, int64_t o, int64_t i) {
    if (w.format == 0) return load_f(w.data, w.dense_dt, o * w.ld + i);
    if (w.format == 1)
        return fp8_e4m3_to_f(static_cast<const uint8_t*>(w.data)[o * w.ld + i]) *
               weight_scale(w, o >> 7, i >> 7);
    const uint8_t b = static_cast<const uint8_t*>(w.data)[o * w.ld + (i >> 1)];
    return fp4_to_f((i & 1) ? (b >> 4) : (b & 0xF)) * weight_scale(w, o, i >> 5);
}

// Dequantises W[o, i .. i+7] (i a multiple of 8, i + 8 <= in_dim, rows 16-byte friendly) into v.
__device__ __forceinline__ void weight_at8(const WeightRef& w, int64_t o, int64_t i, float v[8]) {
    if (w.format == 1) {
        const uint2 q = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(w.data) + o * w.ld + i);
        const float sc = weight_scale(w, o >> 7, i >> 7);
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = fp8_e4m3_to_f(uint8_t(q.x >> (8 * j))) * sc;
#pragma unroll
        for (int j = 0; j < 4; ++j) v[4 + j] = fp8_e4m3_to_f(uint8_t(q.y >> (8 * j))) * sc;
    } else if (w.format == 2) {
        const uint32_t q =
            *reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(w.data) + o * w.ld + (i >> 1));
        const float sc = weight_scale(w, o, i >> 5);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = fp4_to_f(q >> (4 * j)) * sc;
    } else if (w.dense_dt == Fdt::kF32) {
        const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(w.data) + o * w.ld + i);
        const float4 a = p[0], b = p[1];
        v[0] = a.x;
        v[1] = a.y;
        v[2] = a.z;
        v[3] = a.w;
        v[4] = b.x;
        v[5] = b.y;
        v[6] = b.z;
        v[7] = b.w;
    } else {
        const uint4 q = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.data) + o * w.ld + i);
        const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (w.dense_dt == Fdt::kBF16) {
                v[2 * j] = __uint_as_float(u[j] << 16);
                v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
            } else {
                v[2 * j] = __half2float(__ushort_as_half(uint16_t(u[j])));
                v[2 * j + 1] = __half2float(__ushort_as_half(uint16_t(u[j] >> 16)));
            }
        }
    }
}

// Whether weight_at8 may be used on every row of w (alignment of the 8-element groups).
inline bool weight_vec8_ok(const WeightRef& w) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(w.data);
    if (w.in_dim % 8 != 0) return false;
    switch (w.format) {
        case 1:
            return base % 8 == 0 && w.ld % 8 == 0;
        case 2:
            return base % 4 == 0 && w.ld % 4 == 0;
        default: {
            const int64_t es = w.dense_dt == Fdt::kF32 ? 4 : 2;
            return base % 16 == 0 && (w.ld * es) % 16 == 0;
        }
    }
}

// The clamped SwiGLU of the reference (limit > 0 clamps the gate from above and the up projection both ways;
// +inf or <= 0 leaves them), in double as the reference: swiglu and every MoE kernel.
__device__ __forceinline__ float swiglu_clamped(float g, float u, float limit) {
    if (limit > 0) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
    }
    return float(double(g) / (1.0 + exp(-double(g))) * double(u));
}

// rope's factors for one pair at `angle` (position x inverse frequency, in f32 as the reference): cos and
// sin in double, rounded to f32, times mscale; sin negated for the inverse rotation. Every rope kernel uses
// these two helpers, so their bits agree.
struct RopeCs {
    float cs, sn;
};
__device__ __forceinline__ RopeCs rope_cs(float angle, float mscale, bool inverse) {
    const float sn = float(sin(double(angle))) * mscale;
    return {float(cos(double(angle))) * mscale, inverse ? -sn : sn};
}
// The pair (u, v) rotated: no FMA, as the reference rounds each product.
__device__ __forceinline__ float rope_first(float u, float v, RopeCs f) {
    return __fsub_rn(__fmul_rn(u, f.cs), __fmul_rn(v, f.sn));
}
__device__ __forceinline__ float rope_second(float u, float v, RopeCs f) {
    return __fadd_rn(__fmul_rn(v, f.cs), __fmul_rn(u, f.sn));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Deterministic block sum (fixed tree); `red` holds >= 32 doubles; every thread gets the result.
__device__ __forceinline__ double block_sum_d(double v, double* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double t = lane < nw ? red[lane] : 0.0;
    t = warp_sum_d(t);
    return t;
}

}  // namespace di::cuda
