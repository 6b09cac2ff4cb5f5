// Linears and routed experts on AMX machines (Intel Xeon from Sapphire Rapids on): TDPBF16PS multiplies 16
// weight rows x 32 columns by 32 columns x 16 tokens into 16 x 16 f32 sums, 16 times the products of one
// vdpbf16ps. Weights: e4m3 and e2m1 (exact in bf16) converted by the AVX-512 kernels' converters, their
// power-of-two scales folded into the exponents; bf16 as they are. x: one bf16 plane where its values are
// exact in bf16 (the native precision's quantised rows), three where they are f32 (x = hi + mid + lo
// exactly). So every product is exact, and a (token, weight row) sum runs over the whole row in one tile
// accumulator, 32 columns a step in the converters' lane order, the planes in order: its order is fixed by
// in_dim alone, whatever the batch, the tile or the thread (deterministic; the callers pick the tiles per
// row group, cpu_kernels.h, which keeps batch invariance). The rounding differs from the AVX-512 kernels'
// (another order): tests/ops/cpu_amx_test.cpp holds the tiles to their own sum bound.
//
// A weight block whose scales would take a bf16 exponent out of range (scales below 2^-117 or above 2^119
// for fp8, 2^-125 / 2^125 for fp4: no released checkpoint has them) runs on the f32 tiles instead; that
// choice depends on the weights alone.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "ops/cpu/cpu_bf16_convert.h"
#include "ops/cpu/cpu_kernels.h"

#if defined(__x86_64__) && !defined(__clang__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define DI_HAS_AMX_CODE 1
#endif

namespace di::ops::cpu {

#if DI_HAS_AMX_CODE
#define DI_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512vbmi")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive in avx512fintrin.h

namespace {

constexpr int64_t kBlockRows = kAmxRows;  // weight rows converted at once: two A tiles
constexpr int64_t kStep = 32;             // columns per TDPBF16PS
constexpr int64_t kPad = 32;              // bf16 past each converted row: no 4 KiB stride between tile rows
constexpr int64_t kChunkCols = 256;       // columns converted at once for a few tokens: 32 rows in 16 KiB

bool machine_has_amx() {
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vbmi"))
        return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
    if (!amx_bf16 || !amx_tile) return false;
    // Linux hands out the 8 KiB tile state only to a process that asks (ARCH_REQ_XCOMP_PERM, XTILEDATA).
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

std::atomic<int>& amx_switch() {  // 1 on, 0 off; the machine's answer and DEEPINFER_CPU_AMX at start
    static std::atomic<int> on = [] {
        const char* env = std::getenv("DEEPINFER_CPU_AMX");
        return machine_has_amx() && !(env != nullptr && std::string_view(env) == "0") ? 1 : 0;
    }();
    return on;
}

// Tiles 0-3: sums (weight rows 0-15 / 16-31 x token groups 0 / 1); 4, 5: weight rows; 6, 7: token groups of
// n0 and n1 tokens. Loaded only when the token counts change; released at the end of each call.
struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};
thread_local int64_t configured_n0 = -1, configured_n1 = -1;

DI_AMX void configure(int64_t n0, int64_t n1) {
    if (n0 == configured_n0 && n1 == configured_n1) return;
    TileConfig c;
    for (int t = 0; t < 8; ++t) c.rows[t] = 16;
    c.colsb[0] = c.colsb[1] = c.colsb[6] = uint16_t(4 * n0);
    c.colsb[2] = c.colsb[3] = c.colsb[7] = uint16_t(4 * n1);
    c.colsb[4] = c.colsb[5] = 64;
    _tile_loadconfig(&c);
    configured_n0 = n0, configured_n1 = n1;
}

DI_AMX void release() {
    _tile_release();
    configured_n0 = configured_n1 = -1;
}

// The exponent of a power-of-two scale, or false when it is not one or the exponent would take a value of
// the weight format (exponents lo .. hi) out of bf16's normal range.
bool scale_shift(float s, int lo, int hi, int& shift) {
    const uint32_t b = std::bit_cast<uint32_t>(s);
    if ((b & 0x807FFFFFu) != 0) return false;  // negative, or not a power of two
    const int e = int(b >> 23) - 127;
    if (lo + e < -126 || hi + e > 127) return false;
    shift = e;
    return true;
}

// bf16 values v times 2^shift (per 16-bit element of d = shift << 7), zeros left alone.
DI_AMX inline __m512i scaled(__m512i v, __m512i d) {
    return _mm512_mask_add_epi16(v, _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7FFF)), v, d);
}

// How a 32-row block is computed. fp8: the block's 128-row scale row folded into the weights (fold_w) or,
// when every x value stays normal, into a scaled copy of x (the same exact products, so the same bits; the
// weights then convert without the extra adds); f32 when neither can take a scale.
struct BlockPlan {
    bool f32 = false, fold_w = true;
    std::array<int16_t, kMaxScales> shift16{};  // fp8: scale exponent << 7 per 128-column block
};

void plan_block(const QWeight& w, int64_t ob, int64_t rows, AmxX xr, BlockPlan& p) {
    p.f32 = false, p.fold_w = true;
    if (w.format == WeightFormat::kDense) return;  // bf16: read as it is
    if (w.format == WeightFormat::kFp8Block) {
        int lo = 1000, hi = -1000;
        for (int64_t b = 0; b < w.in_dim / 128; ++b) {
            int e = 0;
            if (!scale_shift(load_scale(w.scale, ob / 128, b), -9, 8, e)) return void(p.f32 = true);  // e4m3
            p.shift16[size_t(b)] = int16_t(e * 128);
            lo = std::min(lo, e), hi = std::max(hi, e);
        }
        p.fold_w = !(xr.lo > xr.hi || (xr.lo + lo >= 1 && xr.hi + hi <= 254));  // x's bf16 exponent fields
        return;
    }
    const int64_t groups = w.in_dim / 32;  // fp4: e8m0 bytes 2 .. 252 keep e2m1 (2^-1 .. 6) times them normal
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* sb = w.scale.ptr<uint8_t>() + (ob + r) * w.scale.stride[0];
        for (int64_t g = 0; g < groups; ++g)
            if (sb[g] < 2 || sb[g] > 252) return void(p.f32 = true);
    }
}

// Columns [c0, c1) of weight rows [ob, ob + rows) as bf16 (times their scales where the plan folds them)
// into buf (row stride ld); ahead: ask for row_ahead's rows meanwhile.
DI_AMX void convert_fp8(const QWeight& w, int64_t ob, int64_t rows, int64_t c0, int64_t c1,
                        const BlockPlan& p, uint16_t* buf, int64_t ld, bool ahead) {
    const Fp8Bf16Tables& t = fp8_bf16_tables();
    const __m512i thi0 = _mm512_load_si512(t.hi), thi1 = _mm512_load_si512(t.hi + 64);
    const __m512i tlo0 = _mm512_load_si512(t.lo), tlo1 = _mm512_load_si512(t.lo + 64);
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* q = w.data.ptr<uint8_t>() + (ob + r) * w.data.stride[0];
        const uint8_t* pf = ahead ? row_ahead(w, ob + r) : nullptr;
        uint16_t* dst = buf + r * ld;  // column c at dst[c - c0]
        for (int64_t c = c0; c < c1; c += 64) {
            if (pf != nullptr) _mm_prefetch(reinterpret_cast<const char*>(pf + c), _MM_HINT_T0);
            __m512i a, b;
            fp8_to_bf16_64(q + c, thi0, thi1, tlo0, tlo1, a, b);
            if (p.fold_w) {
                const __m512i d = _mm512_set1_epi16(p.shift16[size_t(c / 128)]);
                a = scaled(a, d), b = scaled(b, d);
            }
            _mm512_storeu_si512(dst + (c - c0), a);
            _mm512_storeu_si512(dst + (c - c0) + 32, b);
        }
    }
}

DI_AMX void convert_fp4(const QWeight& w, int64_t ob, int64_t rows, int64_t c0, int64_t c1, uint16_t* buf,
                        int64_t ld, bool ahead) {
    const Fp4Bf16Tables& t = fp4_bf16_tables();
    const __m512i thi = _mm512_load_si512(t.hi), tlo = _mm512_load_si512(t.lo);
    const __m512i lanes = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* q = w.data.ptr<uint8_t>() + (ob + r) * w.data.stride[0];
        const uint8_t* sb = w.scale.ptr<uint8_t>() + (ob + r) * w.scale.stride[0];
        const uint8_t* pf = ahead ? row_ahead(w, ob + r) : nullptr;
        uint16_t* dst = buf + r * ld;             // column c at dst[c - c0]
        for (int64_t c = c0; c < c1; c += 128) {  // bytes c / 2 .. + 63, groups c / 32 .. + 3
            if (pf != nullptr) _mm_prefetch(reinterpret_cast<const char*>(pf + c / 2), _MM_HINT_T0);
            __m512i v[4];
            fp4_to_bf16_128(q + c / 2, thi, tlo, v);
            uint32_t four;
            std::memcpy(&four, sb + c / 32, 4);
            __m128i e = _mm_slli_epi32(
                _mm_sub_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(int(four))), _mm_set1_epi32(127)), 7);
            e = _mm_or_si128(_mm_and_si128(e, _mm_set1_epi32(0xFFFF)), _mm_slli_epi32(e, 16));  // both halves
            const __m512i d = _mm512_permutexvar_epi32(lanes, _mm512_castsi128_si512(e));
            for (int j = 0; j < 4; ++j) _mm512_storeu_si512(dst + (c - c0) + 32 * j, scaled(v[j], d));
        }
    }
}

// Sum tiles: 0 rows 0-15 x group 0, 1 rows 16-31 x group 0, 2 and 3 alike for group 1.
DI_AMX void zero_sums() {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

// Token groups for accumulate: x0 of n0 tokens and x1 of n1 (0: none), each `planes` bf16 planes of
// n * in values (amx_prepare_x's layout).
struct Groups {
    const uint16_t *x0, *x1;
    int64_t n0, n1, in, planes;
};

// Steps [s0, s1) of 32 columns: weight rows from buf (column s0 * 32 at buf, row stride ld), every plane of
// the token groups in plane order.
template <bool kTwoA, bool kTwoB>
DI_AMX void accumulate(const uint16_t* buf, int64_t ld, const Groups& g, int64_t s0, int64_t s1) {
    const int64_t lda = 2 * ld;
    for (int64_t c = s0; c < s1; ++c) {
        const uint16_t* a = buf + (c - s0) * kStep;
        _tile_loadd(4, a, lda);
        if constexpr (kTwoA) _tile_loadd(5, a + 16 * ld, lda);
        for (int64_t p = 0; p < g.planes; ++p) {
            _tile_loadd(6, g.x0 + p * g.n0 * g.in + c * kStep * g.n0, 4 * g.n0);
            _tile_dpbf16ps(0, 4, 6);
            if constexpr (kTwoA) _tile_dpbf16ps(1, 5, 6);
            if constexpr (kTwoB) {
                _tile_loadd(7, g.x1 + p * g.n1 * g.in + c * kStep * g.n1, 4 * g.n1);
                _tile_dpbf16ps(2, 4, 7);
                if constexpr (kTwoA) _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
}

DI_AMX void accumulate_any(bool two_a, const uint16_t* buf, int64_t ld, const Groups& g, int64_t s0,
                           int64_t s1) {
    if (g.n1 > 0)
        two_a ? accumulate<true, true>(buf, ld, g, s0, s1) : accumulate<false, true>(buf, ld, g, s0, s1);
    else
        two_a ? accumulate<true, false>(buf, ld, g, s0, s1) : accumulate<false, false>(buf, ld, g, s0, s1);
}

// A 16 x 16 f32 tile (rows: weight rows, columns: tokens) transposed: col[n] holds column n.
DI_AMX void transpose16(const float* tile, __m512 (&col)[16]) {
    __m512 a[16], b[16];
    for (int k = 0; k < 8; ++k) {  // 32-bit pairs of rows 2k, 2k + 1 within each 128-bit lane
        const __m512 r0 = _mm512_load_ps(tile + 32 * k), r1 = _mm512_load_ps(tile + 32 * k + 16);
        a[2 * k] = _mm512_unpacklo_ps(r0, r1), a[2 * k + 1] = _mm512_unpackhi_ps(r0, r1);
    }
    for (int k = 0; k < 4;
         ++k)  // 64-bit: lane L of b[4k + m] = rows 4k .. 4k + 3 of column 4L + {0, 2, 1, 3}[m]
        for (int j = 0; j < 2; ++j) {
            const __m512d lo = _mm512_castps_pd(a[4 * k + j]), hi = _mm512_castps_pd(a[4 * k + 2 + j]);
            b[4 * k + j] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi));
            b[4 * k + 2 + j] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi));
        }
    constexpr int kColumn[4] = {0, 2, 1, 3};
    for (int m = 0; m < 4; ++m) {  // 128-bit lanes: the four row blocks of each column
        const __m512 s0 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0x88),
                     s1 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0xDD);
        const __m512 s2 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0x88),
                     s3 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0xDD);
        col[0 + kColumn[m]] = _mm512_shuffle_f32x4(s0, s2, 0x88);
        col[8 + kColumn[m]] = _mm512_shuffle_f32x4(s0, s2, 0xDD);
        col[4 + kColumn[m]] = _mm512_shuffle_f32x4(s1, s3, 0x88);
        col[12 + kColumn[m]] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
    }
}

// The sum tiles of tokens t0 .. t0 + n0 + n1 into res (rows: tokens; columns from col, rows of the block).
DI_AMX void store_sums(int64_t rows, int64_t t0, int64_t n0, int64_t n1, float* res, int64_t ldr,
                       int64_t col) {
    alignas(64) float tile[256];
    __m512 c[16];
    for (int g = 0; g < (n1 > 0 ? 2 : 1); ++g)
        for (int a = 0; a < (rows > 16 ? 2 : 1); ++a) {
            switch (2 * g + a) {
                case 0:
                    _tile_stored(0, tile, 64);
                    break;
                case 1:
                    _tile_stored(1, tile, 64);
                    break;
                case 2:
                    _tile_stored(2, tile, 64);
                    break;
                default:
                    _tile_stored(3, tile, 64);
                    break;
            }
            transpose16(tile, c);
            const int64_t ng = g == 0 ? n0 : n1, mrows = std::min<int64_t>(16, rows - 16 * a);
            const __mmask16 keep = __mmask16((1u << mrows) - 1);
            for (int64_t n = 0; n < ng; ++n)
                _mm512_mask_storeu_ps(res + (t0 + 16 * g + n) * ldr + col + 16 * a, keep, c[n]);
        }
}

// x (amx_prepare_x's layout) times 2^shift per 128-column block, for a plan that folds the scales into x.
DI_AMX void scale_x(const uint16_t* xv, int64_t nx, int64_t in, int64_t planes, const BlockPlan& p,
                    uint16_t* out) {
    for (int64_t n0 = 0; n0 < nx; n0 += 16)
        for (int64_t q = 0; q < planes; ++q) {
            const int64_t ng = std::min<int64_t>(16, nx - n0);
            for (int64_t b = 0; b < in / 128; ++b) {
                const int64_t off = planes * n0 * in + q * ng * in + b * 128 * ng;
                const __m512i d = _mm512_set1_epi16(p.shift16[size_t(b)]);
                for (int64_t i = 0; i < 128 * ng; i += 32)
                    _mm512_storeu_si512(out + off + i, scaled(_mm512_loadu_si512(xv + off + i), d));
            }
        }
}

// Plane q (>= 1) of an f32 row split into bf16 planes: what truncating to bf16 q times leaves (plane 0 is the
// row's own truncation, read by bf16_of_32; x = plane 0 + plane 1 + plane 2 exactly, the last having at
// most 8 significant bits).
DI_AMX void plane_part(const float* x, int64_t in, int q, float* out) {
    const __m512i head = _mm512_set1_epi32(int(0xFFFF0000u));
    for (int64_t c = 0; c < in; c += 16) {
        __m512 v = _mm512_loadu_ps(x + c);
        for (int i = 0; i < q; ++i)
            v = _mm512_sub_ps(v, _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), head)));
        _mm512_storeu_ps(out + c, v);
    }
}

// 32 floats' upper halves (bf16 truncations; exact for values with at most 8 significant bits).
DI_AMX inline __m512i bf16_of_32(const float* f) {
    const __m256i lo = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_loadu_si512(f), 16));
    const __m256i hi = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_loadu_si512(f + 16), 16));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Subnormal bf16 to (signed) zero, as the tiles read them; the nonzero values' exponent fields into the
// range.
DI_AMX inline __m512i fix_bf16(__m512i& vmin, __m512i& vmax, __m512i v) {
    const __m512i e = _mm512_and_si512(_mm512_srli_epi16(v, 7), _mm512_set1_epi16(0xFF));
    const __mmask32 zero = _mm512_cmpeq_epi16_mask(e, _mm512_setzero_si512());
    vmin = _mm512_mask_min_epu16(vmin, ~zero, vmin, e);
    vmax = _mm512_mask_max_epu16(vmax, ~zero, vmax, e);
    return _mm512_and_si512(
        v, _mm512_mask_mov_epi16(_mm512_set1_epi16(-1), zero, _mm512_set1_epi16(int16_t(0x8000))));
}

}  // namespace

bool amx_enabled() { return amx_switch().load(std::memory_order_relaxed) == 1; }

void set_amx_enabled(bool on) {
    static const bool machine = machine_has_amx();
    amx_switch().store(on && machine ? 1 : 0, std::memory_order_relaxed);
}

bool amx_supported(const QWeight& w) {
    if (!amx_enabled() || w.in_dim % 128 != 0 || w.in_dim / 128 > kMaxScales) return false;
    if (w.format == WeightFormat::kFp8Block) return w.data.dtype == DType::kF8E4M3;
    if (w.format == WeightFormat::kDense) return w.data.dtype == DType::kBF16;
    return w.format == WeightFormat::kFp4Group && w.scale.dtype == DType::kE8M0 && w.scale.stride[1] == 1 &&
           w.data.stride[0] >= w.in_dim / 2;
}

DI_AMX AmxX amx_prepare_x(const QWeight& w, const float* const* x, int64_t nx, int planes, uint16_t* out,
                          int64_t t0, int64_t t1) {
    const int64_t in = w.in_dim;
    const bool fp4 = w.format == WeightFormat::kFp4Group, fp8 = w.format == WeightFormat::kFp8Block;
    // Permutations of 64 bf16 (two vectors) into the converters' order: fp8 a and b of each 64 columns; fp4
    // v[k] of each 128 columns, lanes 0-1 from the first 64 columns and lanes 2-3 from the second (the same
    // index picks both halves); bf16 weights are read in column order.
    alignas(64) int16_t idx[4][32];
    for (int p = 0; p < 32; ++p) {
        idx[0][p] = int16_t(fp8 ? fp8_bf16_column(p) : p),
        idx[1][p] = int16_t(fp8 ? fp8_bf16_column(32 + p) : 32 + p);
        if (fp4)
            for (int k = 0; k < 4; ++k) idx[k][p] = int16_t(fp4_bf16_column(32 * k + p) % 64);
    }
    __m512i vidx[4];
    for (int k = 0; k < 4; ++k) vidx[k] = _mm512_load_si512(idx[k]);
    __m512i vmin = _mm512_set1_epi16(255), vmax = _mm512_setzero_si512();
    thread_local std::vector<uint16_t> tmp;  // a group's rows in the weights' order, before interleaving
    thread_local std::vector<float> part;    // one plane of one row, as floats
    tmp.resize(size_t(16 * in));
    part.resize(size_t(in));
    for (int64_t n0 = t0; n0 < std::min(nx, t1); n0 += 16) {
        const int64_t ng = std::min<int64_t>(16, nx - n0);
        for (int q = 0; q < planes; ++q) {
            uint16_t* plane = out + planes * n0 * in + q * ng * in;  // [in / 32][16 column pairs][ng][2]
            for (int64_t n = 0; n < ng; ++n) {
                const float* src = x[n0 + n];
                if (q > 0) {
                    plane_part(src, in, q, part.data());
                    src = part.data();
                }
                uint16_t* dst =
                    ng == 1 ? plane : tmp.data() + n * in;  // one token: already the tiles' layout
                if (!fp4) {
                    for (int64_t c = 0; c < in; c += 64) {
                        const __m512i s0 = bf16_of_32(src + c), s1 = bf16_of_32(src + c + 32);
                        _mm512_storeu_si512(dst + c,
                                            fix_bf16(vmin, vmax, _mm512_permutex2var_epi16(s0, vidx[0], s1)));
                        _mm512_storeu_si512(dst + c + 32,
                                            fix_bf16(vmin, vmax, _mm512_permutex2var_epi16(s0, vidx[1], s1)));
                    }
                } else {
                    for (int64_t c = 0; c < in; c += 128) {
                        const __m512i s0 = bf16_of_32(src + c), s1 = bf16_of_32(src + c + 32);
                        const __m512i s2 = bf16_of_32(src + c + 64), s3 = bf16_of_32(src + c + 96);
                        for (int k = 0; k < 4; ++k) {
                            const __m512i v = _mm512_mask_blend_epi16(
                                0xFFFF0000u, _mm512_permutex2var_epi16(s0, vidx[k], s1),
                                _mm512_permutex2var_epi16(s2, vidx[k], s3));
                            _mm512_storeu_si512(dst + c + 32 * k, fix_bf16(vmin, vmax, v));
                        }
                    }
                }
            }
            if (ng == 1) continue;
            // column pairs (32-bit) interleaved by token: out pair (step, kp, n) = tmp pair (n, step * 16 +
            // kp)
            const __m512i rows =
                _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                   _mm512_set1_epi32(int(in / 2)));
            const __mmask16 m = __mmask16((1u << ng) - 1);
            const int* src = reinterpret_cast<const int*>(tmp.data());
            int* dst = reinterpret_cast<int*>(plane);
            for (int64_t p = 0; p < in / 2; ++p)
                _mm512_mask_storeu_epi32(
                    dst + p * ng, m,
                    _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, rows, src + p, 4));
        }
    }
    alignas(64) uint16_t lo[32], hi[32];
    _mm512_store_si512(lo, vmin);
    _mm512_store_si512(hi, vmax);
    AmxX r;
    r.planes = planes;
    for (int i = 0; i < 32; ++i) r.lo = std::min<int>(r.lo, lo[i]), r.hi = std::max<int>(r.hi, hi[i]);
    return r;
}

DI_AMX void amx_rows(const QWeight& w, int64_t o0, int64_t o1, const uint16_t* xv, AmxX xr,
                     const float* const* xf, int64_t nx, float* res, int64_t ldr, CpuScratch& s) {
    const int64_t in = w.in_dim, steps = in / kStep, planes = xr.planes;
    const bool bf16 = w.format == WeightFormat::kDense;  // read in place: no conversion
    // Up to 32 tokens the weights convert a chunk of columns at a time into a buffer that stays in the L1
    // (the tokens' sums live in the tiles meanwhile); past that the whole block converts once and each
    // 32-token pass reads it. Either way a sum sees the same steps in the same order.
    const bool stream = nx <= 32;
    const int64_t chunk = stream ? std::min<int64_t>(kChunkCols, in) : in, ld = chunk + kPad;
    thread_local std::vector<uint16_t> buf, xs;
    if (buf.size() < size_t(kBlockRows * ld)) buf.assign(size_t(kBlockRows * ld), 0);
    thread_local BlockPlan plan;  // 8 KiB of shifts: filled per block, never copied
    int64_t xs_row = -1;          // the 128-row scale row xs is scaled for
    for (int64_t ob = o0; ob < o1; ob += kBlockRows) {
        const int64_t rows = std::min(kBlockRows, o1 - ob);
        plan_block(w, ob, rows, xr, plan);
        plan.fold_w |= !stream;  // many tokens: scaling the weights once costs less than x per scale row
        if (plan.f32) {          // the f32 tiles, kTileRows weight rows at a time
            if (s.acc.size() < size_t(nx * kTileRows)) s.acc.resize(size_t(nx * kTileRows));
            for (int64_t o = ob; o < ob + rows; o += kTileRows) {
                const int64_t nw = std::min<int64_t>(kTileRows, ob + rows - o);
                weight_tile(w, o, nw, xf, nx, s, s.acc.data());
                for (int64_t r = 0; r < nx; ++r)
                    for (int64_t k = 0; k < nw; ++k)
                        res[r * ldr + (o - o0) + k] = s.acc[size_t(r * kTileRows + k)];
            }
            continue;
        }
        const uint16_t* x = xv;
        if (w.format == WeightFormat::kFp8Block && !plan.fold_w) {
            if (xs_row != ob / 128) {
                xs.resize(size_t(planes * nx * in));
                scale_x(xv, nx, in, planes, plan, xs.data());
                xs_row = ob / 128;
            }
            x = xs.data();
        }
        // the block's columns [c0, c1) as bf16 rows: converted into buf, or the bf16 weight rows themselves
        auto rows_at = [&](int64_t c0, int64_t c1, bool ahead, int64_t& stride) -> const uint16_t* {
            if (bf16 && rows == kBlockRows) {  // whole tiles of rows: read in place
                stride = w.data.stride[0];
                return w.data.ptr<uint16_t>() + ob * stride + c0;
            }
            stride = ld;
            if (bf16)  // the last rows: copied, as the tiles read 16 rows
                for (int64_t r = 0; r < rows; ++r)
                    std::copy_n(w.data.ptr<uint16_t>() + (ob + r) * w.data.stride[0] + c0, c1 - c0,
                                buf.data() + r * ld);
            else if (w.format == WeightFormat::kFp8Block)
                convert_fp8(w, ob, rows, c0, c1, plan, buf.data(), ld, ahead);
            else
                convert_fp4(w, ob, rows, c0, c1, buf.data(), ld, ahead);
            return buf.data();
        };
        const bool two_a = rows > 16;
        if (stream) {
            const int64_t n0 = std::min<int64_t>(16, nx), n1 = nx - n0;
            const Groups g{x, n1 > 0 ? x + planes * 16 * in : x, n0, n1, in, planes};
            configure(n0, n1 > 0 ? n1 : n0);
            zero_sums();
            for (int64_t c = 0; c < in; c += chunk) {
                // the next chunk of these rows, or the next block's first, asked for while this one computes
                if (c + chunk < in)
                    prefetch_rows(w, ob, rows, c + chunk, c + 2 * chunk);
                else
                    prefetch_rows(w, ob + kBlockRows, kBlockRows, 0, chunk);
                int64_t stride = 0;
                const uint16_t* a = rows_at(c, c + chunk, false, stride);
                accumulate_any(two_a, a, stride, g, c / kStep, (c + chunk) / kStep);
            }
            store_sums(rows, 0, n0, n1, res, ldr, ob - o0);
            continue;
        }
        int64_t stride = 0;
        const uint16_t* a = rows_at(0, in, true, stride);
        for (int64_t t0 = 0; t0 < nx; t0 += 32) {  // two token groups a pass
            const int64_t n0 = std::min<int64_t>(16, nx - t0), n1 = std::min<int64_t>(16, nx - t0 - n0);
            const uint16_t* x0 = x + planes * t0 * in;
            const Groups g{x0, n1 > 0 ? x0 + planes * 16 * in : x0, n0, n1, in, planes};
            configure(n0, n1 > 0 ? n1 : n0);
            zero_sums();
            accumulate_any(two_a, a, stride, g, 0, steps);
            store_sums(rows, t0, n0, n1, res, ldr, ob - o0);
        }
    }
    release();
}

#pragma GCC diagnostic pop

#else

bool amx_enabled() { return false; }
void set_amx_enabled(bool) {}
bool amx_supported(const QWeight&) { return false; }
AmxX amx_prepare_x(const QWeight&, const float* const*, int64_t, int, uint16_t*, int64_t, int64_t) {
    return {};
}
void amx_rows(const QWeight&, int64_t, int64_t, const uint16_t*, AmxX, const float* const*, int64_t, float*,
              int64_t, CpuScratch&) {}

#endif

}  // namespace di::ops::cpu
