// FP4 experts of the `native` precision on AVX-512 BF16 machines: the experts' inputs are e4m3 values times
// power-of-two block scales (MoeArgs::act), exact in bf16, and so is every e2m1 weight, so vdpbf16ps sums 32
// exact products per instruction. Per 64 weight bytes (128 values, four 32-value groups): the low and the
// high nibbles become bf16 through 16-entry byte tables (vpermb) and are interleaved by unpacklo/unpackhi,
// which leaves group L in 128-bit lane L of all four vectors; the four products go into one block sum, whose
// lanes are then scaled by their group's UE8M0 scale and added to the row's total (one FMA); the total's 16
// lanes are folded at the end. The x rows are stored in that lane order (native_fp4_prepare_x). Each (token,
// row) result comes from the same instructions whatever the batch, tile or thread: batch-invariant and
// deterministic; its rounding differs from the f32 path's (another order, vdpbf16ps flushing denormals), as
// native_fp8's does.
#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "ops/cpu/cpu_bf16_convert.h"
#include "ops/cpu/cpu_kernels.h"

#if defined(__x86_64__) && !defined(__clang__)
#include <immintrin.h>
#endif

namespace di::ops::cpu {

#if defined(__x86_64__) && !defined(__clang__)
#define DI_NATIVE_FP4 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive in avx512fintrin.h

namespace {

constexpr int kBytes = 64;    // weight bytes (128 values) per step
constexpr int kGroup = 32;    // values per scale
constexpr int kMaxRowsX = 4;  // token rows per pass
constexpr int kMaxGroups = 512;

// A row's group scales as floats (the UE8M0 byte b is 2^(b - 127): the float with exponent field b, or
// load_scale's value for 0 and 255).
DI_NATIVE_FP4 void row_scales(const QWeight& w, int64_t o, float* out) {
    const int64_t groups = w.in_dim / kGroup;
    const uint8_t* sb = w.scale.ptr<uint8_t>() + o * w.scale.stride[0];
    bool plain = true;
    int64_t g = 0;
    for (; g + 16 <= groups; g += 16) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + g));
        plain &= _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(b, _mm_setzero_si128()),
                                                _mm_cmpeq_epi8(b, _mm_set1_epi8(char(0xFF))))) == 0;
        _mm512_storeu_si512(out + g, _mm512_slli_epi32(_mm512_cvtepu8_epi32(b), 23));
    }
    for (; g < groups; ++g) out[g] = load_scale(w.scale, o, g);  // the tail
    if (!plain)
        for (g = 0; g < groups; ++g) out[g] = load_scale(w.scale, o, g);
}

// Two weight rows as fp4_to_bf16_128 makes them (in bf16 per row), for token rows past the first group.
DI_NATIVE_FP4 void convert_rows(const uint8_t* w0, const uint8_t* w1, int64_t in, uint16_t* out) {
    const Fp4Bf16Tables& t = fp4_bf16_tables();
    const __m512i thi = _mm512_load_si512(t.hi), tlo = _mm512_load_si512(t.lo);
    for (int k = 0; k < 2; ++k)
        for (int64_t b = 0; b < in / 2; b += kBytes) {
            __m512i v[4];
            fp4_to_bf16_128((k == 0 ? w0 : w1) + b, thi, tlo, v);
            for (int j = 0; j < 4; ++j) _mm512_storeu_si512(out + k * in + 2 * b + 32 * j, v[j]);
        }
}

// R token rows x 2 weight rows; sc0, sc1: the rows' group scales. kConverted: w0, w1 are convert_rows' bf16
// rows, else the fp4 rows (then pf0, pf1: rows to ask for ahead, a line per step beside the loads; null:
// none). The same values in the same instructions either way, so the same bits.
template <int R, bool kConverted>
DI_NATIVE_FP4 void pair_dots(const void* w0, const void* w1, const uint8_t* pf0, const uint8_t* pf1,
                             const float* sc0, const float* sc1, const uint16_t* const* x, int64_t in,
                             float* res) {
    const Fp4Bf16Tables& t = fp4_bf16_tables();
    const __m512i thi = _mm512_load_si512(t.hi), tlo = _mm512_load_si512(t.lo);
    const __m512i lanes = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 tot[R][2];
    for (int r = 0; r < R; ++r) tot[r][0] = tot[r][1] = _mm512_setzero_ps();
    for (int64_t b = 0; b < in / 2; b += kBytes) {  // bytes b .. b + 63: values 2b .. 2b + 127
        __m512i v[2][4];
        if constexpr (kConverted) {
            for (int j = 0; j < 4; ++j) {
                v[0][j] = _mm512_loadu_si512(static_cast<const uint16_t*>(w0) + 2 * b + 32 * j);
                v[1][j] = _mm512_loadu_si512(static_cast<const uint16_t*>(w1) + 2 * b + 32 * j);
            }
        } else {
            if (pf0 != nullptr) _mm_prefetch(reinterpret_cast<const char*>(pf0 + b), _MM_HINT_T0);
            if (pf1 != nullptr) _mm_prefetch(reinterpret_cast<const char*>(pf1 + b), _MM_HINT_T0);
            fp4_to_bf16_128(static_cast<const uint8_t*>(w0) + b, thi, tlo, v[0]);
            fp4_to_bf16_128(static_cast<const uint8_t*>(w1) + b, thi, tlo, v[1]);
        }
        const int64_t g = 2 * b / kGroup;
        const __m512 s[2] = {_mm512_permutexvar_ps(lanes, _mm512_broadcast_f32x4(_mm_loadu_ps(sc0 + g))),
                             _mm512_permutexvar_ps(lanes, _mm512_broadcast_f32x4(_mm_loadu_ps(sc1 + g)))};
        for (int r = 0; r < R; ++r) {
            const uint16_t* xr = x[r] + 2 * b;
            __m512bh xv[4];
            for (int j = 0; j < 4; ++j) xv[j] = (__m512bh)_mm512_loadu_si512(xr + 32 * j);
            for (int k = 0; k < 2; ++k) {
                __m512 blk = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)v[k][0], xv[0]);
                for (int j = 1; j < 4; ++j) blk = _mm512_dpbf16_ps(blk, (__m512bh)v[k][j], xv[j]);
                tot[r][k] = _mm512_fmadd_ps(blk, s[k], tot[r][k]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int k = 0; k < 2; ++k) res[r * kTileRows + k] = fold_lanes(tot[r][k]);
}

}  // namespace

bool native_fp4_supported(const QWeight& w) {
    static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bf16");
    return cpu && w.format == WeightFormat::kFp4Group && w.in_dim % (2 * kBytes) == 0 &&
           w.in_dim / kGroup <= kMaxGroups && w.scale.dtype == DType::kE8M0 &&
           w.data.stride[0] >= w.in_dim / 2;
}

void native_fp4_prepare_x(const float* x, int64_t in, uint16_t* out) {
    for (int64_t c = 0; c < in; c += 2 * kBytes)  // 128 values: the four vectors of fp4_to_bf16_128
        for (int v = 0; v < 4; ++v)
            for (int l = 0; l < 4; ++l)
                for (int p = 0; p < 8; ++p) {
                    const int64_t e = c + 32 * l + 16 * (v & 1) + 2 * p + (v >> 1);
                    out[c + 32 * v + 8 * l + p] = uint16_t(std::bit_cast<uint32_t>(x[e]) >> 16);  // exact
                }
}

DI_NATIVE_FP4 void native_fp4_tile(const QWeight& w, int64_t o0, int64_t nw, const uint16_t* const* x,
                                   int64_t nx, float* res) {
    const int64_t in = w.in_dim;
    alignas(64) float sc[2][kMaxGroups];
    thread_local std::vector<uint16_t> conv;  // a pair's rows as bf16, when more than one group reads them
    for (int k = 0; k < kTileRows; k += 2) {
        const int64_t r0 = o0 + std::min<int64_t>(k, nw - 1), r1 = o0 + std::min<int64_t>(k + 1, nw - 1);
        const uint8_t* w0 = w.data.ptr<uint8_t>() + r0 * w.data.stride[0];
        const uint8_t* w1 = w.data.ptr<uint8_t>() + r1 * w.data.stride[0];
        row_scales(w, r0, sc[0]);
        row_scales(w, r1, sc[1]);
        const uint8_t *pf0 = row_ahead(w, o0 + k), *pf1 = row_ahead(w, o0 + k + 1);
        const bool reuse = nx > kMaxRowsX;
        if (reuse) {
            conv.resize(size_t(2 * in));
            convert_rows(w0, w1, in, conv.data());
        }
        const void* v0 = reuse ? static_cast<const void*>(conv.data()) : w0;
        const void* v1 = reuse ? static_cast<const void*>(conv.data() + in) : w1;
        for (int64_t r = 0; r < nx;) {
            const int64_t left = nx - r;
            float* out = res + r * kTileRows + k;
            const int g = left >= kMaxRowsX ? 4 : left >= 2 ? 2 : 1;
            if (reuse) {
                g == 4   ? pair_dots<4, true>(v0, v1, nullptr, nullptr, sc[0], sc[1], x + r, in, out)
                : g == 2 ? pair_dots<2, true>(v0, v1, nullptr, nullptr, sc[0], sc[1], x + r, in, out)
                         : pair_dots<1, true>(v0, v1, nullptr, nullptr, sc[0], sc[1], x + r, in, out);
            } else {
                g == 4   ? pair_dots<4, false>(v0, v1, pf0, pf1, sc[0], sc[1], x + r, in, out)
                : g == 2 ? pair_dots<2, false>(v0, v1, pf0, pf1, sc[0], sc[1], x + r, in, out)
                         : pair_dots<1, false>(v0, v1, pf0, pf1, sc[0], sc[1], x + r, in, out);
            }
            r += g;
        }
    }
}

#pragma GCC diagnostic pop

#else

bool native_fp4_supported(const QWeight&) { return false; }
void native_fp4_prepare_x(const float*, int64_t, uint16_t*) {}
void native_fp4_tile(const QWeight&, int64_t, int64_t, const uint16_t* const*, int64_t, float*) {}

#endif

}  // namespace di::ops::cpu
