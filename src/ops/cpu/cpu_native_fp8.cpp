// FP8 linears of the `native` precision on AVX-512 BF16 machines: the activations are already e4m3 values
// times power-of-two block scales (ActQuant::kFp8Block128), so they and the e4m3 weights are exact in bf16,
// every product of the two is exact in f32, and vdpbf16ps takes 32 of them per instruction where the f32
// path spends a conversion, a multiply and an add on 16. Per 128-column block of a (token, weight row) pair:
// the block's products summed by vdpbf16ps in a fixed lane order, times the weight's block scale, added to
// the row's total (one FMA); the total's 16 lanes folded at the end. Each (token, row) result comes from the
// same instructions whatever the batch, tile or thread: batch-invariant and deterministic. Its rounding
// differs from the f32 path's (another order, vdpbf16ps flushing denormals), so native linears are held to
// the sum bound of ref (tests/ops/act_quant_test.cpp), as every cpu linear is.
//
// Weights: 64 fp8 bytes become 64 bf16 with two 128-entry byte tables (vpermi2b: the high and the low byte
// of each value's bf16, the sign or-ed in), interleaved by unpacklo/unpackhi: so the activation chunk is
// stored in that lane order (native_fp8_prepare_x).
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
#define DI_NATIVE_FP8 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16")))

namespace {

constexpr int kChunk = 64;    // weights converted at once
constexpr int kBlock = 128;   // fp8 block scale width
constexpr int kMaxRowsX = 4;  // token rows per pass

// Two weight rows as fp8_to_bf16_64 makes them (a then b per chunk), for token rows past the first group.
DI_NATIVE_FP8 void convert_rows(const uint8_t* w0, const uint8_t* w1, int64_t in, uint16_t* out) {
    const Fp8Bf16Tables& t = fp8_bf16_tables();
    const __m512i thi0 = _mm512_load_si512(t.hi), thi1 = _mm512_load_si512(t.hi + 64);
    const __m512i tlo0 = _mm512_load_si512(t.lo), tlo1 = _mm512_load_si512(t.lo + 64);
    for (int k = 0; k < 2; ++k)
        for (int64_t c = 0; c < in; c += kChunk) {
            __m512i a, b;
            fp8_to_bf16_64((k == 0 ? w0 : w1) + c, thi0, thi1, tlo0, tlo1, a, b);
            _mm512_storeu_si512(out + k * in + c, a);
            _mm512_storeu_si512(out + k * in + c + 32, b);
        }
}

// R token rows (prepared by native_fp8_prepare_x) x 2 weight rows, sc: the pair's block scales. kConverted:
// w0, w1 are convert_rows' bf16 rows, else the fp8 rows (then pf0, pf1: rows to ask for ahead, a line per
// chunk beside the loads; null: none). The same values in the same instructions either way, so the same bits.
template <int R, bool kConverted>
DI_NATIVE_FP8 void pair_dots(const void* w0, const void* w1, const uint8_t* pf0, const uint8_t* pf1,
                             const uint16_t* const* x, const float* sc, int64_t in, float* res) {
    const Fp8Bf16Tables& t = fp8_bf16_tables();
    const __m512i thi0 = _mm512_load_si512(t.hi), thi1 = _mm512_load_si512(t.hi + 64);
    const __m512i tlo0 = _mm512_load_si512(t.lo), tlo1 = _mm512_load_si512(t.lo + 64);
    __m512 tot[R][2];
    for (int r = 0; r < R; ++r) tot[r][0] = tot[r][1] = _mm512_setzero_ps();
    for (int64_t c0 = 0; c0 < in; c0 += kBlock) {
        __m512 blk[R][2];
        for (int r = 0; r < R; ++r) blk[r][0] = blk[r][1] = _mm512_setzero_ps();
        for (int64_t c = c0; c < c0 + kBlock; c += kChunk) {
            __m512i a[2], b[2];
            if constexpr (kConverted) {
                const auto* v0 = static_cast<const uint16_t*>(w0) + c;
                const auto* v1 = static_cast<const uint16_t*>(w1) + c;
                a[0] = _mm512_loadu_si512(v0), b[0] = _mm512_loadu_si512(v0 + 32);
                a[1] = _mm512_loadu_si512(v1), b[1] = _mm512_loadu_si512(v1 + 32);
            } else {
                if (pf0 != nullptr) _mm_prefetch(reinterpret_cast<const char*>(pf0 + c), _MM_HINT_T0);
                if (pf1 != nullptr) _mm_prefetch(reinterpret_cast<const char*>(pf1 + c), _MM_HINT_T0);
                fp8_to_bf16_64(static_cast<const uint8_t*>(w0) + c, thi0, thi1, tlo0, tlo1, a[0], b[0]);
                fp8_to_bf16_64(static_cast<const uint8_t*>(w1) + c, thi0, thi1, tlo0, tlo1, a[1], b[1]);
            }
            for (int r = 0; r < R; ++r) {
                const __m512bh xa = (__m512bh)_mm512_loadu_si512(x[r] + c);
                const __m512bh xb = (__m512bh)_mm512_loadu_si512(x[r] + c + 32);
                for (int k = 0; k < 2; ++k) {
                    blk[r][k] = _mm512_dpbf16_ps(blk[r][k], (__m512bh)a[k], xa);
                    blk[r][k] = _mm512_dpbf16_ps(blk[r][k], (__m512bh)b[k], xb);
                }
            }
        }
        const __m512 s = _mm512_set1_ps(sc[c0 / kBlock]);
        for (int r = 0; r < R; ++r)
            for (int k = 0; k < 2; ++k) tot[r][k] = _mm512_fmadd_ps(blk[r][k], s, tot[r][k]);
    }
    for (int r = 0; r < R; ++r)
        for (int k = 0; k < 2; ++k) res[r * kTileRows + k] = fold_lanes(tot[r][k]);
}

}  // namespace

bool native_fp8_supported(const QWeight& w) {
    static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bf16");
    return cpu && w.format == WeightFormat::kFp8Block && w.in_dim % kBlock == 0 &&
           w.in_dim / kBlock <= kMaxScales && w.data.dtype == DType::kF8E4M3;
}

DI_NATIVE_FP8 void native_fp8_prepare_x(const float* x, int64_t in, uint16_t* out) {
    for (int64_t c = 0; c < in; c += kChunk)
        for (int h = 0; h < 2; ++h)      // a then b of fp8_to_bf16_64
            for (int l = 0; l < 4; ++l)  // its four 128-bit lanes
                for (int j = 0; j < 8; ++j)
                    out[c + 32 * h + 8 * l + j] =
                        uint16_t(std::bit_cast<uint32_t>(x[c + 16 * l + 8 * h + j]) >> 16);  // exact: e4m3
}

DI_NATIVE_FP8 void native_fp8_tile(const QWeight& w, int64_t o0, int64_t nw, const uint16_t* const* x,
                                   int64_t nx, float* res) {
    const int64_t in = w.in_dim, nb = in / kBlock;
    float sc[kMaxScales];
    for (int64_t b = 0; b < nb; ++b) sc[b] = load_scale(w.scale, o0 / kBlock, b);
    const uint8_t* rows[kTileRows];
    for (int64_t k = 0; k < kTileRows; ++k)
        rows[k] = w.data.ptr<uint8_t>() + (o0 + std::min(k, nw - 1)) * w.data.stride[0];
    thread_local std::vector<uint16_t> conv;  // a pair's rows as bf16, when more than one group reads them
    for (int k = 0; k < kTileRows; k += 2) {
        const uint8_t *pf0 = row_ahead(w, o0 + k), *pf1 = row_ahead(w, o0 + k + 1);
        const bool reuse = nx > kMaxRowsX;
        if (reuse) {
            conv.resize(size_t(2 * in));
            convert_rows(rows[k], rows[k + 1], in, conv.data());
        }
        const void* w0 = reuse ? static_cast<const void*>(conv.data()) : rows[k];
        const void* w1 = reuse ? static_cast<const void*>(conv.data() + in) : rows[k + 1];
        for (int64_t r = 0; r < nx;) {
            const int64_t left = nx - r;
            float* out = res + r * kTileRows + k;
            const int g = left >= kMaxRowsX ? 4 : left >= 2 ? 2 : 1;
            if (reuse) {
                g == 4   ? pair_dots<4, true>(w0, w1, nullptr, nullptr, x + r, sc, in, out)
                : g == 2 ? pair_dots<2, true>(w0, w1, nullptr, nullptr, x + r, sc, in, out)
                         : pair_dots<1, true>(w0, w1, nullptr, nullptr, x + r, sc, in, out);
            } else {
                g == 4   ? pair_dots<4, false>(w0, w1, pf0, pf1, x + r, sc, in, out)
                : g == 2 ? pair_dots<2, false>(w0, w1, pf0, pf1, x + r, sc, in, out)
                         : pair_dots<1, false>(w0, w1, pf0, pf1, x + r, sc, in, out);
            }
            r += g;
        }
    }
}

#else

bool native_fp8_supported(const QWeight&) { return false; }
void native_fp8_prepare_x(const float*, int64_t, uint16_t*) {}
void native_fp8_tile(const QWeight&, int64_t, int64_t, const uint16_t* const*, int64_t, float*) {}

#endif

}  // namespace di::ops::cpu
