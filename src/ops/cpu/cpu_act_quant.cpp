// The native precision's activation quantiser (ops/act_quant.h) in vector lanes: the scalar steps' branches
// as lane selects, so every value gets the scalar code's bits. x / s is computed as x * (1 / s): s is 2^e
// with e in [-22, 120] or +inf, so 1 / s is exact (0 for inf) and both round the same quotient once
// (ActBlockScale.DividingEqualsMultiplyingByTheInverse).
#include <cstring>

#include "ops/act_quant.h"
#include "ops/cpu/cpu_kernels.h"

namespace di::ops::cpu {
namespace {

typedef float v16f __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

[[gnu::always_inline]] inline v16f splat(float v) { return v16f{} + v; }

}  // namespace

DI_CPU_CLONES void fp8_quant_dequant_row(const float* x, int64_t n, float* out) {
    static_assert(kActBlock % 16 == 0);
    for (int64_t b = 0; b < n; b += kActBlock) {
        v16f amax{};  // std::max(amax, |x|): a NaN never replaces it
        for (int64_t i = b; i < b + kActBlock; i += 16) {
            v16f v;
            std::memcpy(&v, x + i, 64);
            const v16u bits = (v16u)v & 0x7fffffffu;
            const v16f a = (v16f)bits;
            amax = amax < a ? a : amax;
        }
        float m = 0.0f;
        for (int j = 0; j < 16; ++j) m = std::max(m, amax[j]);
        const float s = act_block_scale(m), inv = 1.0f / s;
        for (int64_t i = b; i < b + kActBlock; i += 16) {
            v16f v;
            std::memcpy(&v, x + i, 64);
            v16f t = v * inv;
            t = t < splat(-kFp8Max) ? splat(-kFp8Max) : t;  // std::max(t, -448): NaN stays
            t = splat(kFp8Max) < t ? splat(kFp8Max) : t;    // std::min(t, 448)
            const v16u tb = (v16u)t, sign = tb & 0x80000000u, ab = tb & 0x7fffffffu;
            const v16f a = (v16f)ab;
            // normal: 3 mantissa bits, the 20 below rounded to nearest, ties to even; subnormal: step 2^-9
            const v16f normal = (v16f)((ab + 0x7FFFFu + ((ab >> 20) & 1u)) & ~0xFFFFFu);
            const v16f sub = (a + 0x1p14f) - 0x1p14f;
            v16f r = a < splat(0x1p-6f) ? sub : normal;
            r = a >= splat(kFp8Max) ? splat(kFp8Max) : r;
            v16f q = (v16f)((v16u)r | sign);  // copysign
            q = t == t ? q : t;               // NaN stays NaN
            const v16f o = q * s;
            std::memcpy(out + i, &o, 64);
        }
    }
}

}  // namespace di::ops::cpu
