// FP8 e4m3 and FP4 e2m1 weights to bf16 in registers, for the native kernels on AVX-512 BF16 and AMX
// machines: every e4m3 and e2m1 value is exact in bf16, so the conversion is a table lookup of each value's
// two bf16 bytes. Both leave the values in a lane order of their own (stated below), in which the kernels'
// activation rows are stored too.
#pragma once

#include <bit>
#include <cstdint>

#include "core/dtype.h"

#if defined(__x86_64__) && !defined(__clang__)
#include <immintrin.h>

#define DI_BF16_CONVERT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive in avx512fintrin.h

namespace di::ops::cpu {

// bf16 of every e4m3 magnitude (the sign is bit 7 of both), split into high and low bytes.
struct Fp8Bf16Tables {
    alignas(64) uint8_t hi[128];
    alignas(64) uint8_t lo[128];
    Fp8Bf16Tables() {
        for (int m = 0; m < 128; ++m) {
            const uint32_t b = std::bit_cast<uint32_t>(fp8_e4m3_to_f32(uint8_t(m)));
            hi[m] = uint8_t(b >> 24), lo[m] = uint8_t(b >> 16);  // exact: e4m3 needs 3 mantissa bits
        }
    }
};
inline const Fp8Bf16Tables& fp8_bf16_tables() {
    static const Fp8Bf16Tables t;
    return t;
}

// 64 e4m3 weights as bf16: a = columns 0-7, 16-23, 32-39, 48-55, b = 8-15, 24-31, 40-47, 56-63 (the
// interleave of unpacklo/unpackhi within each 128-bit lane). thi0/thi1, tlo0/tlo1: the tables' halves.
DI_BF16_CONVERT inline void fp8_to_bf16_64(const uint8_t* q, __m512i thi0, __m512i thi1, __m512i tlo0,
                                           __m512i tlo1, __m512i& a, __m512i& b) {
    const __m512i bytes = _mm512_loadu_si512(q);
    __m512i hi = _mm512_permutex2var_epi8(thi0, bytes, thi1);  // index bits 6..0: the magnitude
    const __m512i lo = _mm512_permutex2var_epi8(tlo0, bytes, tlo1);
    hi = _mm512_ternarylogic_epi32(hi, bytes, _mm512_set1_epi8(char(0x80)), 0xF8);  // hi | (bytes & 0x80)
    a = _mm512_unpacklo_epi8(lo, hi);
    b = _mm512_unpackhi_epi8(lo, hi);
}

// Column (0..63) of position j of fp8_to_bf16_64's a (j < 32) then b.
constexpr int fp8_bf16_column(int j) { return (j % 32) / 8 * 16 + (j / 32) * 8 + j % 8; }

// bf16 of the 16 e2m1 codes (sign in bit 3), as high and low bytes (the rest of the 64 zero).
struct Fp4Bf16Tables {
    alignas(64) uint8_t hi[64] = {};
    alignas(64) uint8_t lo[64] = {};
    Fp4Bf16Tables() {
        for (int n = 0; n < 16; ++n) {
            const uint32_t b = std::bit_cast<uint32_t>(kFp4Values[n]);
            hi[n] = uint8_t(b >> 24), lo[n] = uint8_t(b >> 16);  // exact: e2m1 needs 1 mantissa bit
        }
    }
};
inline const Fp4Bf16Tables& fp4_bf16_tables() {
    static const Fp4Bf16Tables t;
    return t;
}

// 64 fp4 bytes (128 values, low nibble first) as bf16: v[0] = even values, first half of each 128-bit lane's
// bytes; v[1] even, second half; v[2], v[3] the odd values alike. Lane L of every v holds group L (values
// 32L .. 32L + 31), so one scale per lane.
DI_BF16_CONVERT inline void fp4_to_bf16_128(const uint8_t* q, __m512i thi, __m512i tlo, __m512i (&v)[4]) {
    const __m512i bytes = _mm512_loadu_si512(q);
    const __m512i mask = _mm512_set1_epi8(0x0F);
    const __m512i ne = _mm512_and_si512(bytes, mask),
                  no = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), mask);
    const __m512i he = _mm512_permutexvar_epi8(ne, thi), le = _mm512_permutexvar_epi8(ne, tlo);
    const __m512i ho = _mm512_permutexvar_epi8(no, thi), lo = _mm512_permutexvar_epi8(no, tlo);
    v[0] = _mm512_unpacklo_epi8(le, he), v[1] = _mm512_unpackhi_epi8(le, he);
    v[2] = _mm512_unpacklo_epi8(lo, ho), v[3] = _mm512_unpackhi_epi8(lo, ho);
}

// Value index (0..127) of position p of fp4_to_bf16_128's v[p / 32] (element p % 32).
constexpr int fp4_bf16_column(int p) {
    const int v = p / 32, l = (p % 32) / 8, e = p % 8;
    return 32 * l + 16 * (v & 1) + 2 * e + (v >> 1);
}

}  // namespace di::ops::cpu

#pragma GCC diagnostic pop

#endif
