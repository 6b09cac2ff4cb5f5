// Dequantisation by bit manipulation (vectorisable, exact) and 16-lane float dot products. Each hot
// function is cloned for AVX-512, AVX2 and baseline x86-64; with -ffp-contract=off all clones round alike.
#include "ops/cpu/cpu_kernels.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace di::ops::cpu {
namespace {

constexpr int kLanes = 16;
typedef float v16 __attribute__((vector_size(kLanes * sizeof(float))));

[[gnu::always_inline]] inline v16 load16(const float* p) {
    v16 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Fixed folding tree: lane j += lane j + w for w = 8, 4, 2, 1.
[[gnu::always_inline]] inline float fold(v16 a) {
    float t[kLanes];
    std::memcpy(t, &a, sizeof t);
    for (int w = kLanes / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) t[j] += t[j + w];
    return t[0];
}

const float* f16_table() {
    static const std::vector<float> t = [] {
        std::vector<float> v(65536);
        for (uint32_t h = 0; h < 65536; ++h) v[h] = f16_to_f32(uint16_t(h));
        return v;
    }();
    return t.data();
}

typedef uint32_t v16u __attribute__((vector_size(16 * sizeof(uint32_t))));
typedef int32_t v16i __attribute__((vector_size(16 * sizeof(int32_t))));

typedef uint32_t v4u __attribute__((vector_size(4 * sizeof(uint32_t))));

// 16 bytes zero-extended to 16 x u32 (a word permute and per-lane shifts; GCC 12 lowers
// __builtin_convertvector from bytes to scalar inserts).
[[gnu::always_inline]] inline v16u load16b(const uint8_t* p) {
    v4u w;
    std::memcpy(&w, p, sizeof w);
    const v16u x = __builtin_shufflevector(w, w, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const v16u shift = {0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24};
    return (x >> shift) & 0xffu;
}

// e4m3 byte -> f32 bits by integer ops: normals rebias the exponent (+120); the subnormals m * 2^-9 go
// through an exact int -> float conversion. No subnormal f32 is ever formed (each would cost a microcode
// assist of ~100 cycles). 0x7f/0xff are NaN.
[[gnu::always_inline]] inline v16 fp8_values(v16u b) {
    const v16u e = (b >> 3) & 15u, m = b & 7u;
    const v16u sub = (v16u)(__builtin_convertvector((v16i)m, v16) * 0x1p-9f);
    const v16u mag = e != 0u ? ((e + 120u) << 23) | (m << 20) : sub;
    const v16u nan = (v16u)(v16{} + NAN);
    return (v16)((b & 0x7fu) == 0x7fu ? nan : mag | ((b & 0x80u) << 24));
}

// e2m1 nibble -> f32 bits the same way: normals rebias (+126), the one subnormal 0.5 is 0x3f000000.
[[gnu::always_inline]] inline v16 fp4_values(v16u v) {
    const v16u e = (v >> 1) & 3u, m = v & 1u;
    const v16u zero_or_half = m != 0u ? v16u{} + 0x3f000000u : v16u{};
    return (v16)((e != 0u ? ((e + 126u) << 23) | (m << 22) : zero_or_half) | ((v & 8u) << 28));
}

// A whole row: element i has scale sc[i / kFp8Block].
DI_CPU_CLONES void dequant_fp8_generic(const uint8_t* q, int64_t n, const float* sc, float* d) {
    for (int64_t i0 = 0; i0 < n; i0 += kFp8Block) {
        const int64_t i1 = std::min(n, i0 + kFp8Block);
        const float s = sc[i0 / kFp8Block];
        int64_t i = i0;
        for (; i + 16 <= i1; i += 16) {
            const v16 f = fp8_values(load16b(q + i)) * s;
            std::memcpy(d + i, &f, sizeof f);
        }
        for (; i < i1; ++i) d[i] = fp8_e4m3_to_f32(q[i]) * s;
    }
}

// A whole row of n_bytes (2 n_bytes values; the low nibble is the even column): byte i has scale
// sc[2 i / kFp4Group]. A full group is 16 bytes -> 32 values.
DI_CPU_CLONES void dequant_fp4_generic(const uint8_t* q, int64_t n_bytes, const float* sc, float* d) {
    int64_t i = 0;
    for (; i + 16 <= n_bytes; i += 16) {
        const float s = sc[2 * i / kFp4Group];
        const v16u b = load16b(q + i);
        const v16 lo = fp4_values(b & 15u) * s, hi = fp4_values(b >> 4) * s;
        const v16 first =
            __builtin_shufflevector(lo, hi, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const v16 second =
            __builtin_shufflevector(lo, hi, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        std::memcpy(d + 2 * i, &first, sizeof first);
        std::memcpy(d + 2 * i + 16, &second, sizeof second);
    }
    for (; i < n_bytes; ++i) {
        const float s = sc[2 * i / kFp4Group];
        d[2 * i] = fp4_at(q, 2 * i) * s;
        d[2 * i + 1] = fp4_at(q, 2 * i + 1) * s;
    }
}

#if defined(__x86_64__) && !defined(__clang__)
// AVX-512 versions of the two above (same bit manipulation, so the same values): GCC 12 lowers the
// byte-widening of the generic versions through the stack, which stalls on store forwarding.
#define DI_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive in avx512fintrin.h

DI_AVX512 __m512 fp8_values_avx512(__m128i bytes) {
    const __m512i b = _mm512_cvtepu8_epi32(bytes);
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(b, 3), _mm512_set1_epi32(15));
    const __m512i m = _mm512_and_si512(b, _mm512_set1_epi32(7));
    const __m512i normal = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(120)), 23),
                                           _mm512_slli_epi32(m, 20));
    const __m512i sub = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(0x1p-9f)));
    __m512i bits = _mm512_mask_blend_epi32(_mm512_test_epi32_mask(e, e), sub, normal);
    bits = _mm512_or_si512(bits, _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24));
    const __mmask16 nan =
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7f)), _mm512_set1_epi32(0x7f));
    bits = _mm512_mask_blend_epi32(nan, bits, _mm512_set1_epi32(0x7fc00000));
    return _mm512_castsi512_ps(bits);
}

DI_AVX512 void dequant_fp8_avx512(const uint8_t* q, int64_t n, const float* sc, float* d) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {  // 16 divides kFp8Block: one scale per step
        const __m512 f = fp8_values_avx512(_mm_loadu_si128((const __m128i*)(q + i)));
        _mm512_storeu_ps(d + i, _mm512_mul_ps(f, _mm512_set1_ps(sc[i / kFp8Block])));
    }
    for (; i < n; ++i) d[i] = fp8_e4m3_to_f32(q[i]) * sc[i / kFp8Block];
}

// e2m1 through a 16-entry table permute (the table is kFp4Values, so the values are those of fp4_at).
DI_AVX512 void dequant_fp4_avx512(const uint8_t* q, int64_t n_bytes, const float* sc, float* d) {
    const __m512 table = _mm512_loadu_ps(kFp4Values);
    const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i second = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    int64_t i = 0;
    for (; i + 16 <= n_bytes; i += 16) {  // one full group
        const __m512 vs = _mm512_set1_ps(sc[2 * i / kFp4Group]);
        const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(q + i)));
        const __m512 lo =
            _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_and_si512(b, _mm512_set1_epi32(15)), table), vs);
        const __m512 hi = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table), vs);
        _mm512_storeu_ps(d + 2 * i, _mm512_permutex2var_ps(lo, first, hi));
        _mm512_storeu_ps(d + 2 * i + 16, _mm512_permutex2var_ps(lo, second, hi));
    }
    for (; i < n_bytes; ++i) {
        const float s = sc[2 * i / kFp4Group];
        d[2 * i] = fp4_at(q, 2 * i) * s;
        d[2 * i + 1] = fp4_at(q, 2 * i + 1) * s;
    }
}

#pragma GCC diagnostic pop

// AVX2 versions (same bit manipulation, so the same values): on an AVX2-only machine the generic clones
// dequantised FP8 at 0.5-0.7 GB/s (cpu_ops_bench), a fifth of the time it takes to read the bytes.
#define DI_AVX2 __attribute__((target("avx2,f16c")))

DI_AVX2 __m256 fp8_values_avx2(__m128i bytes8) {
    const __m256i b = _mm256_cvtepu8_epi32(bytes8);
    const __m256i e = _mm256_and_si256(_mm256_srli_epi32(b, 3), _mm256_set1_epi32(15));
    const __m256i m = _mm256_and_si256(b, _mm256_set1_epi32(7));
    const __m256i normal = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(120)), 23),
                                           _mm256_slli_epi32(m, 20));
    const __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0x1p-9f)));
    const __m256i e_zero = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());
    __m256i bits = _mm256_blendv_epi8(normal, sub, e_zero);
    bits = _mm256_or_si256(bits, _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24));
    const __m256i nan =
        _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f)), _mm256_set1_epi32(0x7f));
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7fc00000), nan);
    return _mm256_castsi256_ps(bits);
}

// e4m3 as f16 bits: exponent and mantissa moved up 7 bits make the f16 of value * 2^-8, subnormals
// included (a hardware conversion, exact), so value * s = f16 * (s * 2^8) with the same single rounding
// as fp8_values * s. Sixteen values at once: for a byte x = 128 sign + m, (x + (x & 0x80)) << 7 =
// sign 2^15 + m 2^7 in a 16-bit lane (the sign's carry lands on bit 15): three integer ops per 16 values.
// Chunks holding a NaN byte (0x7f/0xff) and scales whose 2^8 multiple could overflow take the blend path.
[[gnu::always_inline]] DI_AVX2 inline __m256i fp8_f16_bits_avx2(__m128i bytes16) {
    const __m256i x = _mm256_cvtepu8_epi16(bytes16);
    return _mm256_slli_epi16(_mm256_add_epi16(x, _mm256_and_si256(x, _mm256_set1_epi16(0x80))), 7);
}
DI_AVX2 inline void fp8_f16x16_avx2(__m128i bytes16, __m256& lo, __m256& hi) {
    const __m256i h = fp8_f16_bits_avx2(bytes16);
    lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

DI_AVX2 void dequant_fp8_avx2(const uint8_t* q, int64_t n, const float* sc, float* d) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {  // 16 divides kFp8Block: one scale per step
        const float s = sc[i / kFp8Block];
        const __m128i b = _mm_loadu_si128((const __m128i*)(q + i));
        const bool nan =
            _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(b, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f)));
        if (!nan && s <= 0x1p100f) {
            const __m256 s8 = _mm256_set1_ps(s * 256.0f);
            __m256 lo, hi;
            fp8_f16x16_avx2(b, lo, hi);
            _mm256_storeu_ps(d + i, _mm256_mul_ps(lo, s8));
            _mm256_storeu_ps(d + i + 8, _mm256_mul_ps(hi, s8));
        } else {
            _mm256_storeu_ps(d + i, _mm256_mul_ps(fp8_values_avx2(b), _mm256_set1_ps(s)));
            _mm256_storeu_ps(d + i + 8,
                             _mm256_mul_ps(fp8_values_avx2(_mm_srli_si128(b, 8)), _mm256_set1_ps(s)));
        }
    }
    for (; i < n; ++i) d[i] = fp8_e4m3_to_f32(q[i]) * sc[i / kFp8Block];
}

// e2m1: the magnitude (3 bits) through an 8-entry permute of kFp4Values[0..7], the sign bit or-ed in
// (kFp4Values[8 + i] is -kFp4Values[i], -0 included).
DI_AVX2 inline __m256 fp4_values_avx2(__m256 table, __m256i nib) {
    const __m256 mag = _mm256_permutevar8x32_ps(table, _mm256_and_si256(nib, _mm256_set1_epi32(7)));
    return _mm256_or_ps(
        mag, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(8)), 28)));
}

DI_AVX2 void dequant_fp4_avx2(const uint8_t* q, int64_t n_bytes, const float* sc, float* d) {
    const __m256 table = _mm256_loadu_ps(kFp4Values);
    int64_t i = 0;
    for (; i + 8 <= n_bytes; i += 8) {  // 8 bytes = 16 values, inside one 32-group (16 divides kFp4Group)
        const __m256 vs = _mm256_set1_ps(sc[2 * i / kFp4Group]);
        const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(q + i)));
        const __m256 lo = _mm256_mul_ps(fp4_values_avx2(table, b), vs);                        // even columns
        const __m256 hi = _mm256_mul_ps(fp4_values_avx2(table, _mm256_srli_epi32(b, 4)), vs);  // odd columns
        const __m256 a = _mm256_unpacklo_ps(lo, hi), c = _mm256_unpackhi_ps(lo, hi);
        _mm256_storeu_ps(d + 2 * i, _mm256_permute2f128_ps(a, c, 0x20));
        _mm256_storeu_ps(d + 2 * i + 8, _mm256_permute2f128_ps(a, c, 0x31));
    }
    for (; i < n_bytes; ++i) {
        const float s = sc[2 * i / kFp4Group];
        d[2 * i] = fp4_at(q, 2 * i) * s;
        d[2 * i + 1] = fp4_at(q, 2 * i + 1) * s;
    }
}

bool has_avx512() {
    static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl");
    return ok;
}
bool has_avx2() {
    static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    return ok;
}

void dequant_fp8(const uint8_t* q, int64_t n, const float* sc, float* d) {
    if (has_avx512()) return dequant_fp8_avx512(q, n, sc, d);
    if (has_avx2()) return dequant_fp8_avx2(q, n, sc, d);
    dequant_fp8_generic(q, n, sc, d);
}
void dequant_fp4(const uint8_t* q, int64_t n_bytes, const float* sc, float* d) {
    if (has_avx512()) return dequant_fp4_avx512(q, n_bytes, sc, d);
    if (has_avx2()) return dequant_fp4_avx2(q, n_bytes, sc, d);
    dequant_fp4_generic(q, n_bytes, sc, d);
}
#else
void dequant_fp8(const uint8_t* q, int64_t n, const float* sc, float* d) { dequant_fp8_generic(q, n, sc, d); }
void dequant_fp4(const uint8_t* q, int64_t n_bytes, const float* sc, float* d) {
    dequant_fp4_generic(q, n_bytes, sc, d);
}
#endif

DI_CPU_CLONES void dequant_bf16(const uint16_t* q, int64_t n, float* d) {
    for (int64_t i = 0; i < n; ++i) d[i] = std::bit_cast<float>(uint32_t(q[i]) << 16);
}

void dequant_row(const QWeight& w, int64_t o, float* d) {
    const int64_t in = w.in_dim;
    switch (w.format) {
        case WeightFormat::kDense: {
            const int64_t off = o * w.data.stride[0];
            if (w.data.dtype == DType::kF32) {
                std::memcpy(d, w.data.ptr<float>() + off, size_t(in) * sizeof(float));
            } else if (w.data.dtype == DType::kBF16) {
                dequant_bf16(w.data.ptr<uint16_t>() + off, in, d);
            } else {
                DI_CHECK(w.data.dtype == DType::kF16, "linear: dense weight dtype {}",
                         dtype_name(w.data.dtype));
                const float* t = f16_table();
                const uint16_t* q = w.data.ptr<uint16_t>() + off;
                for (int64_t i = 0; i < in; ++i) d[i] = t[q[i]];
            }
            return;
        }
        case WeightFormat::kFp8Block: {
            float sc[kMaxScales];
            const int64_t nb = (in + kFp8Block - 1) / kFp8Block;
            DI_CHECK(nb <= kMaxScales, "fp8 in_dim {} too wide", in);
            for (int64_t b = 0; b < nb; ++b) sc[b] = load_scale(w.scale, o / kFp8Block, b);
            dequant_fp8(w.data.ptr<uint8_t>() + o * w.data.stride[0], in, sc, d);
            return;
        }
        case WeightFormat::kFp4Group: {
            DI_CHECK(in % 2 == 0, "fp4 weight with odd in_dim {}", in);
            float sc[kMaxScales];
            const int64_t ng = (in + kFp4Group - 1) / kFp4Group;
            DI_CHECK(ng <= kMaxScales, "fp4 in_dim {} too wide", in);
            for (int64_t g = 0; g < ng; ++g) sc[g] = load_scale(w.scale, o, g);
            dequant_fp4(w.data.ptr<uint8_t>() + o * w.data.stride[0], in / 2, sc, d);
            return;
        }
    }
}

// Four input rows against kTileRows weight rows: 16 lane accumulators (16 zmm with AVX-512), each weight
// vector loaded once per 4 rows. Same per-element order as dots_2x4 / dots_1x4.
[[gnu::always_inline]] inline void dots_4x4(const float* const* x, const float* const* w, int64_t len,
                                            float* res) {
    v16 acc[4][4] = {};
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes) {
        const v16 w0 = load16(w[0] + i), w1 = load16(w[1] + i), w2 = load16(w[2] + i), w3 = load16(w[3] + i);
        for (int r = 0; r < 4; ++r) {
            const v16 u = load16(x[r] + i);
            acc[r][0] += u * w0, acc[r][1] += u * w1, acc[r][2] += u * w2, acc[r][3] += u * w3;
        }
    }
    for (int64_t j = 0; i + j < len; ++j)
        for (int r = 0; r < 4; ++r)
            for (int k = 0; k < 4; ++k) acc[r][k][j] += x[r][i + j] * w[k][i + j];
    for (int r = 0; r < 4; ++r)
        for (int k = 0; k < 4; ++k) res[r * kTileRows + k] = fold(acc[r][k]);
}

// Two input rows against kTileRows weight rows; 8 lane accumulators.
[[gnu::always_inline]] inline void dots_2x4(const float* x0, const float* x1, const float* const* w,
                                            int64_t len, float* r0, float* r1) {
    v16 a00{}, a01{}, a02{}, a03{}, a10{}, a11{}, a12{}, a13{};
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes) {
        const v16 u = load16(x0 + i), v = load16(x1 + i);
        const v16 w0 = load16(w[0] + i), w1 = load16(w[1] + i), w2 = load16(w[2] + i), w3 = load16(w[3] + i);
        a00 += u * w0, a01 += u * w1, a02 += u * w2, a03 += u * w3;
        a10 += v * w0, a11 += v * w1, a12 += v * w2, a13 += v * w3;
    }
    for (int64_t j = 0; i + j < len; ++j) {  // tail into lanes 0..len%16-1, as in dots_1x4
        a00[j] += x0[i + j] * w[0][i + j], a01[j] += x0[i + j] * w[1][i + j];
        a02[j] += x0[i + j] * w[2][i + j], a03[j] += x0[i + j] * w[3][i + j];
        a10[j] += x1[i + j] * w[0][i + j], a11[j] += x1[i + j] * w[1][i + j];
        a12[j] += x1[i + j] * w[2][i + j], a13[j] += x1[i + j] * w[3][i + j];
    }
    r0[0] = fold(a00), r0[1] = fold(a01), r0[2] = fold(a02), r0[3] = fold(a03);
    r1[0] = fold(a10), r1[1] = fold(a11), r1[2] = fold(a12), r1[3] = fold(a13);
}

[[gnu::always_inline]] inline void dots_1x4(const float* x0, const float* const* w, int64_t len, float* r0) {
    v16 a0{}, a1{}, a2{}, a3{};
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes) {
        const v16 u = load16(x0 + i);
        a0 += u * load16(w[0] + i), a1 += u * load16(w[1] + i);
        a2 += u * load16(w[2] + i), a3 += u * load16(w[3] + i);
    }
    for (int64_t j = 0; i + j < len; ++j) {
        a0[j] += x0[i + j] * w[0][i + j], a1[j] += x0[i + j] * w[1][i + j];
        a2[j] += x0[i + j] * w[2][i + j], a3[j] += x0[i + j] * w[3][i + j];
    }
    r0[0] = fold(a0), r0[1] = fold(a1), r0[2] = fold(a2), r0[3] = fold(a3);
}

}  // namespace

void dequant_rows(const QWeight& w, int64_t o0, int64_t nrows, float* dst, int64_t ld) {
    for (int64_t r = 0; r < nrows; ++r) dequant_row(w, o0 + r, dst + r * ld);
}

namespace {

DI_CPU_CLONES void dot_tile_generic(const float* const* x, int64_t nx, const float* const* w, int64_t len,
                                    float* res) {
    int64_t r = 0;
    for (; r + 4 <= nx; r += 4) dots_4x4(x + r, w, len, res + r * kTileRows);
    for (; r + 2 <= nx; r += 2)
        dots_2x4(x[r], x[r + 1], w, len, res + r * kTileRows, res + (r + 1) * kTileRows);
    if (r < nx) dots_1x4(x[r], w, len, res + r * kTileRows);
}

#if defined(__x86_64__) && !defined(__clang__)
// Lane sums t[16] of one (input row, weight row) pair -> its dot product: the tail columns i .. len - 1
// added into lanes 0.., then the fold tree (lane j += lane j + h), as the 16-lane generic kernels do.
template <class Rows>
[[gnu::always_inline]] inline float finish_lanes(float (&t)[16], const float* x, const Rows& w, int k,
                                                 int64_t i, int64_t len) {
    for (int64_t j = 0; i + j < len; ++j) {
        const float p = x[i + j] * w.at(k, i + j);
        t[j] = t[j] + p;
    }
    for (int h = 8; h >= 1; h /= 2)
        for (int j = 0; j < h; ++j) t[j] += t[j + h];
    return t[0];
}

// The AVX2 dot products, element for element those of the 16-lane kernels above: lane j of a (row, weight
// row) pair sums the elements j, j + 16, ... as two ymm halves (separate multiply and add, as
// -ffp-contract=off makes the generic code), the tail goes into lanes 0.. in order, and the fold is the
// same tree. GCC's AVX2 clone of the generic kernels kept the 16-lane accumulators on the stack (32 ymm for
// the 4 x 4 tile; AVX2 has 16): 49% of a mid-model decode step. Here R x K accumulator pairs stay in
// registers (R <= 2 input rows x 2 weight rows: 8 ymm), so a 4-row weight tile is two passes.
// `Rows` gives the two weight rows: chunk(k, i, lo, hi) their columns i .. i + 15 as f32, at(k, c) one
// column (the tail); FloatRows here, Fp8Rows and Fp4Rows dequantise in registers (weight_tile's fused path).
template <int R, class Rows>
DI_AVX2 void dots_avx2(const float* const* x, const Rows& w, int64_t len, float* res) {
    __m256 acc[R][2][2];
    for (int r = 0; r < R; ++r)
        for (int k = 0; k < 2; ++k) acc[r][k][0] = acc[r][k][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= len; i += 16) {
        __m256 wl[2], wh[2];
        for (int k = 0; k < 2; ++k) w.chunk(k, i, wl[k], wh[k]);
        for (int r = 0; r < R; ++r) {
            const __m256 ul = _mm256_loadu_ps(x[r] + i), uh = _mm256_loadu_ps(x[r] + i + 8);
            for (int k = 0; k < 2; ++k) {
                acc[r][k][0] = _mm256_add_ps(acc[r][k][0], _mm256_mul_ps(ul, wl[k]));
                acc[r][k][1] = _mm256_add_ps(acc[r][k][1], _mm256_mul_ps(uh, wh[k]));
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int k = 0; k < 2; ++k) {
            alignas(32) float t[16];
            _mm256_store_ps(t, acc[r][k][0]);
            _mm256_store_ps(t + 8, acc[r][k][1]);
            res[r * kTileRows + k] = finish_lanes(t, x[r], w, k, i, len);
        }
}

struct FloatRows {
    const float* const* w;
    DI_AVX2 void chunk(int k, int64_t i, __m256& lo, __m256& hi) const {
        lo = _mm256_loadu_ps(w[k] + i), hi = _mm256_loadu_ps(w[k] + i + 8);
    }
    float at(int k, int64_t c) const { return w[k][c]; }
};

static_assert(kTileRows % 2 == 0, "dot_tile_avx2 takes weight rows in pairs");

DI_AVX2 void dot_tile_avx2(const float* const* x, int64_t nx, const float* const* w, int64_t len,
                           float* res) {
    int64_t r = 0;
    for (; r + 2 <= nx; r += 2)
        for (int k = 0; k < kTileRows; k += 2)
            dots_avx2<2>(x + r, FloatRows{w + k}, len, res + r * kTileRows + k);
    if (r < nx)
        for (int k = 0; k < kTileRows; k += 2)
            dots_avx2<1>(x + r, FloatRows{w + k}, len, res + r * kTileRows + k);
}
#endif

}  // namespace

void dot_tile(const float* const* x, int64_t nx, const float* const* w, int64_t len, float* res) {
#if defined(__x86_64__) && !defined(__clang__)
    if (!has_avx512() && has_avx2()) return dot_tile_avx2(x, nx, w, len, res);
#endif
    dot_tile_generic(x, nx, w, len, res);
}

namespace {

#if defined(__x86_64__) && !defined(__clang__)
// 16 FP8 weights of one row as dequant_fp8_avx2 makes them (the same values), in two ymm.
DI_AVX2 inline void fp8_16_avx2(const uint8_t* q, float s, __m256& lo, __m256& hi) {
    const __m128i b = _mm_loadu_si128((const __m128i*)q);
    const bool nan =
        _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(b, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f)));
    if (!nan && s <= 0x1p100f) {
        const __m256 s8 = _mm256_set1_ps(s * 256.0f);
        fp8_f16x16_avx2(b, lo, hi);
        lo = _mm256_mul_ps(lo, s8), hi = _mm256_mul_ps(hi, s8);
    } else {
        lo = _mm256_mul_ps(fp8_values_avx2(b), _mm256_set1_ps(s));
        hi = _mm256_mul_ps(fp8_values_avx2(_mm_srli_si128(b, 8)), _mm256_set1_ps(s));
    }
}

// Two FP8 weight rows (scales sc per 128 columns, shared: the rows sit in one 128-row block) dequantised in
// registers instead of through a buffer: the same weights and sums, without writing and re-reading 4 x
// in_dim floats per tile (64 KiB at in_dim 4096, past L1).
struct Fp8Rows {
    const uint8_t* const* q;
    const float* sc;
    DI_AVX2 void chunk(int k, int64_t i, __m256& lo, __m256& hi) const {
        fp8_16_avx2(q[k] + i, sc[i / kFp8Block], lo, hi);
    }
    float at(int k, int64_t c) const { return fp8_e4m3_to_f32(q[k][c]) * sc[c / kFp8Block]; }
};

// 16 FP4 weights (8 bytes) of one row as dequant_fp4_avx2 makes them (the same values), in column order.
DI_AVX2 inline void fp4_16_avx2(__m256 table, const uint8_t* q, float s, __m256& lo, __m256& hi) {
    const __m256 vs = _mm256_set1_ps(s);
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)q));
    const __m256 even = _mm256_mul_ps(fp4_values_avx2(table, b), vs);
    const __m256 odd = _mm256_mul_ps(fp4_values_avx2(table, _mm256_srli_epi32(b, 4)), vs);
    const __m256 a = _mm256_unpacklo_ps(even, odd), c = _mm256_unpackhi_ps(even, odd);
    lo = _mm256_permute2f128_ps(a, c, 0x20), hi = _mm256_permute2f128_ps(a, c, 0x31);
}

// Two FP4 weight rows with their own group scales sc[0], sc[1] (one per 32 columns), likewise.
struct Fp4Rows {
    const uint8_t* const* q;
    const float* const* sc;
    DI_AVX2 void chunk(int k, int64_t i, __m256& lo, __m256& hi) const {
        fp4_16_avx2(_mm256_loadu_ps(kFp4Values), q[k] + i / 2, sc[k][i / kFp4Group], lo, hi);
    }
    float at(int k, int64_t c) const { return fp4_at(q[k], c) * sc[k][c / kFp4Group]; }
};
#endif

#if defined(__x86_64__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive in avx512fintrin.h
// The same dot products with 16-lane zmm accumulators (lane j of a pair sums elements j, j + 16, ..., the
// tail into lanes 0.., the fold tree of dots_avx2): the generic kernels' bits in half the instructions.
#define DI_AVX512_DOTS __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
template <int R, class Rows>
DI_AVX512_DOTS void dots_avx512(const float* const* x, const Rows& w, int64_t len, float* res) {
    __m512 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    int64_t i = 0;
    if constexpr (requires(__m512 & a) { w.chunk32(0, 0, a, a); }) {  // rows that decode 32 weights at once
        for (; i + 32 <= len; i += 32) {
            __m512 w0[2], w1[2];
            for (int k = 0; k < 2; ++k) w.chunk32(k, i, w0[k], w1[k]);
            for (int r = 0; r < R; ++r) {
                const __m512 u0 = _mm512_loadu_ps(x[r] + i), u1 = _mm512_loadu_ps(x[r] + i + 16);
                for (int k = 0; k < 2; ++k) {
                    acc[r][k] = _mm512_add_ps(acc[r][k], _mm512_mul_ps(u0, w0[k]));
                    acc[r][k] = _mm512_add_ps(acc[r][k], _mm512_mul_ps(u1, w1[k]));
                }
            }
        }
    }
    for (; i + 16 <= len; i += 16) {
        __m512 wv[2];
        for (int k = 0; k < 2; ++k) wv[k] = w.chunk16(k, i);
        for (int r = 0; r < R; ++r) {
            const __m512 u = _mm512_loadu_ps(x[r] + i);
            for (int k = 0; k < 2; ++k) acc[r][k] = _mm512_add_ps(acc[r][k], _mm512_mul_ps(u, wv[k]));
        }
    }
    for (int r = 0; r < R; ++r)
        for (int k = 0; k < 2; ++k) {
            if (i == len) {  // no tail: finish_lanes' fold in registers
                res[r * kTileRows + k] = fold_lanes(acc[r][k]);
                continue;
            }
            alignas(64) float t[16];
            _mm512_store_ps(t, acc[r][k]);
            res[r * kTileRows + k] = finish_lanes(t, x[r], w, k, i, len);
        }
}

// 16 FP8 weights as fp8_16_avx2 makes them (the same f16 route and blend fallback), in one zmm.
DI_AVX512_DOTS inline __m512 fp8_16_avx512(const uint8_t* q, float s) {
    const __m128i b = _mm_loadu_si128((const __m128i*)q);
    if (!_mm_cmpeq_epi8_mask(_mm_and_si128(b, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f)) && s <= 0x1p100f) {
        return _mm512_mul_ps(_mm512_cvtph_ps(fp8_f16_bits_avx2(b)), _mm512_set1_ps(s * 256.0f));
    }
    return _mm512_mul_ps(fp8_values_avx512(b), _mm512_set1_ps(s));
}

struct Fp8Rows512 : Fp8Rows {                      // its rows, scales and tail columns (at)
    const uint8_t* ahead[2] = {nullptr, nullptr};  // rows to ask for, a line per 64 columns (null: none)
    // 32 weights (one scale: 32 divides the 128 block) with one NaN test and one widening to 16-bit lanes
    // where chunk16 does each per 16: the f16 bits of fp8_f16_bits_avx2, so the same values.
    DI_AVX512_DOTS void chunk32(int k, int64_t i, __m512& lo, __m512& hi) const {
        if (ahead[k] != nullptr && i % 64 == 0) _mm_prefetch((const char*)(ahead[k] + i), _MM_HINT_T0);
        const float s = sc[i / kFp8Block];
        const __m256i b = _mm256_loadu_si256((const __m256i*)(q[k] + i));
        if (!_mm256_cmpeq_epi8_mask(_mm256_and_si256(b, _mm256_set1_epi8(0x7f)), _mm256_set1_epi8(0x7f)) &&
            s <= 0x1p100f) {
            const __m512i x = _mm512_cvtepu8_epi16(b);
            const __m512i h =
                _mm512_slli_epi16(_mm512_add_epi16(x, _mm512_and_si512(x, _mm512_set1_epi16(0x80))), 7);
            const __m512 s8 = _mm512_set1_ps(s * 256.0f);
            lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), s8);
            hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), s8);
            return;
        }
        lo = fp8_16_avx512(q[k] + i, s);
        hi = fp8_16_avx512(q[k] + i + 16, s);
    }
    DI_AVX512_DOTS __m512 chunk16(int k, int64_t i) const {
        return fp8_16_avx512(q[k] + i, sc[i / kFp8Block]);
    }
};

// 16 FP4 weights (8 bytes) in column order: each byte twice, even lanes its low nibble, odd lanes its high
// one, through the 16-entry table (kFp4Values: the values of fp4_at), times the group scale.
struct Fp4Rows512 : Fp4Rows {  // its rows, scales and tail columns (at)
    // 32 weights (16 bytes, one scale group at a group boundary) in two zmm: each byte beside itself shifted
    // right by 4 (a 16-bit shift: the neighbour's bits that come in sit above the nibble), and vpermps reads
    // only an index's low 4 bits, so no mask; the table is scaled once per group (table[n] * s, the product
    // chunk16 makes). 6 zmm-port uops per 16 weights with the dot's multiply and add, where chunk16 takes 8.
    const uint8_t* ahead[2] = {nullptr, nullptr};  // rows to ask for, a line per 128 columns (null: none)
    // the rows' e8m0 scale bytes, every one in 1..254 (2^(b - 127) is then the float with exponent field b,
    // load_scale's value), or null: sc's floats
    const uint8_t* sb[2] = {nullptr, nullptr};
    DI_AVX512_DOTS void chunk32(int k, int64_t i, __m512& lo, __m512& hi) const {
        if (ahead[k] != nullptr && i % 128 == 0) _mm_prefetch((const char*)(ahead[k] + i / 2), _MM_HINT_T0);
        const __m128i b = _mm_loadu_si128((const __m128i*)(q[k] + i / 2));
        const __m128i shifted = _mm_srli_epi16(b, 4);
        const float s = sb[k] != nullptr ? std::bit_cast<float>(uint32_t(sb[k][i / kFp4Group]) << 23)
                                         : sc[k][i / kFp4Group];
        const __m512 table = _mm512_mul_ps(_mm512_loadu_ps(kFp4Values), _mm512_set1_ps(s));
        lo = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, shifted)), table);
        hi = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(b, shifted)), table);
    }
    DI_AVX512_DOTS __m512 chunk16(int k, int64_t i) const {
        const __m128i b = _mm_loadl_epi64((const __m128i*)(q[k] + i / 2));
        const __m512i twice = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
        const __m512i nib = _mm512_and_si512(
            _mm512_srlv_epi32(twice, _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4)),
            _mm512_set1_epi32(15));
        return _mm512_mul_ps(_mm512_permutexvar_ps(nib, _mm512_loadu_ps(kFp4Values)),
                             _mm512_set1_ps(sc[k][i / kFp4Group]));
    }
};

// BF16 weights widened in registers (a 16-bit shift, exact): no f32 copy of the tile to write and read back.
struct Bf16Rows512 {
    const uint16_t* const* q;
    const uint8_t* ahead[2] = {nullptr, nullptr};  // rows to ask for, a line per 32 columns (null: none)
    DI_AVX512_DOTS __m512 chunk16(int k, int64_t i) const {
        if (ahead[k] != nullptr && i % 32 == 0) _mm_prefetch((const char*)(ahead[k] + 2 * i), _MM_HINT_T0);
        const __m256i b = _mm256_loadu_si256((const __m256i*)(q[k] + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    }
    float at(int k, int64_t c) const { return std::bit_cast<float>(uint32_t(q[k][c]) << 16); }
};
#pragma GCC diagnostic pop
#endif

#if defined(__x86_64__) && !defined(__clang__)
// One pair of weight rows against nx (1 or 2) input rows: the zmm kernel on AVX-512, else the ymm one (the
// same bits); Rows256 void where only the AVX-512 path exists.
template <class Rows512, class Rows256>
void dots_pair(const float* const* x, int64_t nx, const Rows512& w512, const Rows256* w256, int64_t len,
               float* res) {
    if constexpr (!std::is_void_v<Rows256>) {
        if (!has_avx512())
            return nx == 2 ? dots_avx2<2>(x, *w256, len, res) : dots_avx2<1>(x, *w256, len, res);
    }
    nx == 2 ? dots_avx512<2>(x, w512, len, res) : dots_avx512<1>(x, w512, len, res);
}
#endif

// FP8 tiles against one or two input rows on AVX2 (AVX-512 machines too: the same bits as the 16-lane
// generic kernels that take larger batches there, and 1.3x the decode speed of dequantising through a
// buffer on the 2-core development VM): fused dequantisation (decode sizes).
bool fp8_tile_fused(const QWeight& w, int64_t o0, int64_t nw, const float* const* x, int64_t nx, float* res) {
#if defined(__x86_64__) && !defined(__clang__)
    if (w.format != WeightFormat::kFp8Block || nx > 2 || !has_avx2()) return false;
    const int64_t in = w.in_dim, nb = (in + kFp8Block - 1) / kFp8Block;
    if (nb > kMaxScales || o0 / kFp8Block != (o0 + nw - 1) / kFp8Block) return false;
    float sc[kMaxScales];
    for (int64_t b = 0; b < nb; ++b) sc[b] = load_scale(w.scale, o0 / kFp8Block, b);
    const uint8_t* rows[kTileRows];
    for (int64_t k = 0; k < kTileRows; ++k)
        rows[k] = w.data.ptr<uint8_t>() + (o0 + std::min(k, nw - 1)) * w.data.stride[0];
    for (int k = 0; k < kTileRows; k += 2) {
        const Fp8Rows pair{rows + k, sc};
        Fp8Rows512 pair512{pair};
        if (has_avx512())  // the rows ahead streamed beside the pair's loads
            for (int j = 0; j < 2; ++j) pair512.ahead[j] = row_ahead(w, o0 + k + j);
        else
            prefetch_rows(w, o0 + k + kPrefetchRows, 2);
        dots_pair(x, nx, pair512, &pair, in, res + k);
    }
    return true;
#else
    (void)w, (void)o0, (void)nw, (void)x, (void)nx, (void)res;
    return false;
#endif
}

// The same for FP4 (the routed experts at decode: one pair per selected expert), two rows at a time, each
// with its own group scales.
bool fp4_tile_fused(const QWeight& w, int64_t o0, int64_t nw, const float* const* x, int64_t nx, float* res) {
#if defined(__x86_64__) && !defined(__clang__)
    if (w.format != WeightFormat::kFp4Group || nx > 2 || !has_avx2()) return false;
    const int64_t in = w.in_dim, ng = (in + kFp4Group - 1) / kFp4Group;
    if (in % 2 != 0 || ng > kMaxScales / 2) return false;
    const uint8_t* rows[kTileRows];
    for (int64_t k = 0; k < kTileRows; ++k)
        rows[k] = w.data.ptr<uint8_t>() + (o0 + std::min(k, nw - 1)) * w.data.stride[0];
    // on AVX-512, rows without a tail read their e8m0 scale bytes in the loop (Fp4Rows512::sb)
    const bool bytes =
        has_avx512() && in % kFp4Group == 0 && w.scale.dtype == DType::kE8M0 && w.scale.stride[1] == 1;
    for (int k = 0; k < kTileRows; k += 2) {
        const uint8_t* sb[2] = {nullptr, nullptr};
        bool ok = bytes;
        for (int j = 0; j < 2 && ok; ++j) {
            sb[j] = w.scale.ptr<uint8_t>() + (o0 + std::min<int64_t>(k + j, nw - 1)) * w.scale.stride[0];
            uint8_t lo = 255, hi = 0;
            for (int64_t g = 0; g < ng; ++g) lo = std::min(lo, sb[j][g]), hi = std::max(hi, sb[j][g]);
            ok = lo >= 1 && hi <= 254;
        }
        float sc[2][kMaxScales / 2];
        if (!ok)
            for (int j = 0; j < 2; ++j)
                for (int64_t g = 0; g < ng; ++g)
                    sc[j][g] = load_scale(w.scale, o0 + std::min<int64_t>(k + j, nw - 1), g);
        const float* scp[2] = {sc[0], sc[1]};
        const Fp4Rows pair{rows + k, scp};
        Fp4Rows512 pair512{pair};
        if (ok) pair512.sb[0] = sb[0], pair512.sb[1] = sb[1];
        if (has_avx512())
            for (int j = 0; j < 2; ++j) pair512.ahead[j] = row_ahead(w, o0 + k + j);
        else
            prefetch_rows(w, o0 + k + kPrefetchRows, 2);
        dots_pair(x, nx, pair512, &pair, in, res + k);
    }
    return true;
#else
    (void)w, (void)o0, (void)nw, (void)x, (void)nx, (void)res;
    return false;
#endif
}

// BF16 tiles against one or two input rows on AVX-512 (the heads at decode). On the AVX2 machine a fused
// BF16 tile measured slower than the buffer (docs/benchmarks.md), so there it stays buffered.
bool bf16_tile_fused(const QWeight& w, int64_t o0, int64_t nw, const float* const* x, int64_t nx,
                     float* res) {
#if defined(__x86_64__) && !defined(__clang__)
    if (w.format != WeightFormat::kDense || w.data.dtype != DType::kBF16 || nx > 2 || !has_avx512())
        return false;
    const uint16_t* rows[kTileRows];
    for (int64_t k = 0; k < kTileRows; ++k)
        rows[k] = w.data.ptr<uint16_t>() + (o0 + std::min(k, nw - 1)) * w.data.stride[0];
    for (int k = 0; k < kTileRows; k += 2) {
        Bf16Rows512 pair{rows + k};
        for (int j = 0; j < 2; ++j) pair.ahead[j] = row_ahead(w, o0 + k + j);
        dots_pair<Bf16Rows512, void>(x, nx, pair, nullptr, w.in_dim, res + k);
    }
    return true;
#else
    (void)w, (void)o0, (void)nw, (void)x, (void)nx, (void)res;
    return false;
#endif
}

}  // namespace

void weight_tile(const QWeight& w, int64_t o0, int64_t nw, const float* const* x, int64_t nx, CpuScratch& s,
                 float* res) {
    if (fp8_tile_fused(w, o0, nw, x, nx, res) || fp4_tile_fused(w, o0, nw, x, nx, res) ||
        bf16_tile_fused(w, o0, nw, x, nx, res))
        return;
    const int64_t in = w.in_dim;
    const float* rows[kTileRows];
    if (w.format == WeightFormat::kDense && w.data.dtype == DType::kF32) {
        for (int64_t k = 0; k < kTileRows; ++k)
            rows[k] = w.data.ptr<float>() + (o0 + std::min(k, nw - 1)) * w.data.stride[0];
    } else {
        if (s.w.size() < size_t(kTileRows * in)) s.w.resize(size_t(kTileRows * in));
        dequant_rows(w, o0, nw, s.w.data(), in);
        for (int64_t k = 0; k < kTileRows; ++k) rows[k] = s.w.data() + std::min(k, nw - 1) * in;
    }
    dot_tile(x, nx, rows, w.in_dim, res);
}

}  // namespace di::ops::cpu
