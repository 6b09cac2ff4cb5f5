// Element types of checkpoints and activations, and exact scalar conversions to f32.
// fp8 e4m3 (OCP, no inf, 0x7f/0xff NaN), ue8m0 (2^(b-127), 255 NaN), fp4 e2m1 (two per byte, low nibble
// first).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace di {

enum class DType : uint8_t { kF32, kBF16, kF16, kF8E4M3, kE8M0, kFP4x2, kI8, kU8, kI32, kI64 };

// Bytes per stored element; kFP4x2 is one byte holding two logical values.
size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
bool dtype_is_float(DType t);  // f32, bf16, f16

inline float bf16_to_f32(uint16_t h) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Round-to-nearest-even, as torch does.
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);

inline float fp8_e4m3_to_f32(uint8_t b) {
    const int sign = b >> 7, e = (b >> 3) & 0xF, m = b & 7;
    if (e == 0xF && m == 7) return NAN;
    const float mag = e == 0 ? std::ldexp(float(m) / 8.0f, -6) : std::ldexp(1.0f + float(m) / 8.0f, e - 7);
    return sign ? -mag : mag;
}

// The e4m3 value nearest to v (ties to even), saturating at +-448 (e4m3 has no inf); NaN stays NaN. The same
// rounding as the GPU's cvt.rn.satfinite.e4m3x2.f32.
inline float round_to_fp8_e4m3(float v) {
    if (std::isnan(v)) return v;
    const float a = std::fabs(v);
    float r;
    if (a >= 448.0f) {
        r = 448.0f;
    } else if (a < 0x1p-6f) {
        // the subnormal step 2^-9 is the ulp of 2^14, so the sum rounds to it (ties to even)
        r = (a + 0x1p14f) - 0x1p14f;
    } else {
        // 3 mantissa bits: the 20 below them rounded to nearest, ties to even (a carry bumps the exponent)
        const uint32_t b = std::bit_cast<uint32_t>(a);
        r = std::bit_cast<float>((b + 0x7FFFFu + ((b >> 20) & 1u)) & ~0xFFFFFu);
    }
    return std::copysign(r, v);
}

// The code of an e4m3 value (round_to_fp8_e4m3's results; NaN gives 0x7f): fp8_e4m3_to_f32's inverse.
inline uint8_t fp8_e4m3_bits(float r) {
    if (std::isnan(r)) return 0x7f;
    const uint8_t sign = std::signbit(r) ? 0x80 : 0x00;
    const float a = std::fabs(r);
    if (a < 0x1p-6f) return uint8_t(sign | uint8_t(a * 512.0f));  // subnormal: m 2^-9
    const uint32_t b = std::bit_cast<uint32_t>(a);
    return uint8_t(sign | uint8_t(((b >> 23) - 120u) << 3) | uint8_t((b >> 20) & 7u));
}

inline float e8m0_to_f32(uint8_t b) { return b == 255 ? NAN : std::ldexp(1.0f, int(b) - 127); }

inline constexpr float kFp4Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Logical element `col` of a packed fp4 row.
inline float fp4_at(const uint8_t* row, int64_t col) {
    const uint8_t b = row[col >> 1];
    return kFp4Values[(col & 1) ? (b >> 4) : (b & 0xF)];
}

// Reads element i of a float-typed buffer (f32/bf16/f16) as f32.
inline float load_float(const void* p, DType t, int64_t i) {
    switch (t) {
        case DType::kF32:
            return static_cast<const float*>(p)[i];
        case DType::kBF16:
            return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
        case DType::kF16:
            return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
        default:
            return NAN;
    }
}

// Writes v as element i of an f32 or bf16 buffer (bf16 rounded to nearest even).
inline void store_float(void* p, DType t, int64_t i, float v) {
    if (t == DType::kBF16)
        static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
    else
        static_cast<float*>(p)[i] = v;
}

}  // namespace di
