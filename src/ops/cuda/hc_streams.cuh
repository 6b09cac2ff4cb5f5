// The residual streams' element types on the device (ops/mhc.h): f32 (exact) or bf16 (native), read as f32
// and stored from f32 (bf16 rounded to nearest even); four consecutive elements as one 16-byte (f32) or
// 8-byte (bf16) access. Kernels over the streams take the type S as a template parameter and their
// launchers pick it with by_stream_type.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace di::cuda::hc {

template <class S>
struct Tag {
    using type = S;
};

// f(Tag<float>) or f(Tag<__nv_bfloat16>).
template <class F>
void by_stream_type(bool bf16, F&& f) {
    if (bf16)
        f(Tag<__nv_bfloat16>{});
    else
        f(Tag<float>{});
}

__device__ __forceinline__ float ld1(const float* p) { return *p; }
__device__ __forceinline__ float ld1(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// Four bf16 in 8 bytes as f32.
__device__ __forceinline__ float4 bf16x4(uint2 u) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 ld4(const __nv_bfloat16* p) {
    return bf16x4(*reinterpret_cast<const uint2*>(p));
}
// The same through the read-only path (streams no kernel writes while it reads them).
__device__ __forceinline__ float4 ldg4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float4 ldg4(const __nv_bfloat16* p) {
    return bf16x4(__ldg(reinterpret_cast<const uint2*>(p)));
}
__device__ __forceinline__ float ldg1(const float* p) { return __ldg(p); }
__device__ __forceinline__ float ldg1(const __nv_bfloat16* p) { return __bfloat162float(__ldg(p)); }

__device__ __forceinline__ void st1(float* p, float v) { *p = v; }
__device__ __forceinline__ void st1(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

__device__ __forceinline__ void st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void st4(__nv_bfloat16* p, float4 v) {
    const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    uint2 u;
    u.x = *reinterpret_cast<const uint32_t*>(&a);
    u.y = *reinterpret_cast<const uint32_t*>(&b);
    *reinterpret_cast<uint2*>(p) = u;
}

}  // namespace di::cuda::hc
