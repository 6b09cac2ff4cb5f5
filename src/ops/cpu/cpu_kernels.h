// Inner kernels of the CPU backend: weight-row dequantisation and tiles of float dot products.
// The summation order of every dot product is fixed by its length alone (see cpu_backend.h), so callers may
// tile and thread the work freely without changing any output bit.
#pragma once

#include <climits>
#include <cstdint>
#include <span>

#include "ops/cpu/cpu_backend.h"
#include "ops/linear.h"

#if defined(__x86_64__) && !defined(__clang__)
#include <immintrin.h>
#endif

// The generic vector kernels are compiled once per x86-64 level (AVX-512, AVX2, baseline), picked at load.
#if defined(__x86_64__) && !defined(__clang__)
#define DI_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DI_CPU_CLONES
#endif

namespace di::ops::cpu {

#if defined(__x86_64__) && !defined(__clang__)
// The 16 lanes of a zmm accumulator folded by the fixed tree of the generic kernels (lane j += lane j + h
// for h = 8, 4, 2, 1), in registers: each add takes the same pair of lanes, so the same bits.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive in avx512fintrin.h
__attribute__((target("avx512f"))) inline float fold_lanes(__m512 a) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(a), hi);
    const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
    const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
    return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}
#pragma GCC diagnostic pop
#endif

inline constexpr int kTileRows = 4;          // weight rows per tile
inline constexpr int64_t kMaxScales = 4096;  // scale blocks per row: in_dim up to 131072 (fp4) / 524288 (fp8)

// A quantised weight's scale (f32 or e8m0) at block (r, c), as f32.
float load_scale(const TensorView& s, int64_t r, int64_t c);

// Asks for the bytes of weight rows o .. o + n - 1 (those below out_dim) ahead of their use; the fused
// decode tiles ask for the pair kPrefetchRows ahead of the one they compute (cpu_weight_rows.cpp says why 4).
inline constexpr int64_t kPrefetchRows = 4;
void prefetch_rows(const QWeight& w, int64_t o, int64_t n, int64_t c0 = 0,
                   int64_t c1 = -1);  // columns [c0, c1)
// On AVX-512 the decode tiles instead ask for the row at least kPrefetchRows and kPrefetchBytes below each
// row they read, one line per line consumed (a burst of a whole row's prefetches, or a shorter distance,
// left the single-thread stream at 60% of the read bandwidth: docs/benchmarks.md). Null past the last row.
inline constexpr int64_t kPrefetchBytes = 16384;
const uint8_t* row_ahead(const QWeight& w, int64_t o);

// Below this many multiply-adds a parallel_for costs more (wake-up ~10 us) than it saves.
inline constexpr int64_t kMinParallelMacs = 1 << 16;

// Tiles per pool task: about 8 tasks per thread for balance, all in one task when the op is tiny.
inline int64_t tiles_per_task(int64_t n_tiles, int64_t macs_per_tile, int threads) {
    if (n_tiles * macs_per_tile < kMinParallelMacs) return n_tiles;
    return n_tiles / (8 * int64_t(threads)) > 1 ? n_tiles / (8 * int64_t(threads)) : 1;
}

// Writes the dequantised weight rows [o0, o0 + nrows) as f32 to dst (row stride ld >= in_dim). The values
// equal QWeight::at bit for bit (the same f32 product of decoded value and scale).
void dequant_rows(const QWeight& w, int64_t o0, int64_t nrows, float* dst, int64_t ld);

// res[r * kTileRows + k] = dot(x[r], w[k]) over len elements, for r < nx and k < kTileRows.
void dot_tile(const float* const* x, int64_t nx, const float* const* w, int64_t len, float* res);

// ops/act_quant.h's fp8_block_quant_dequant_row, element for element (its bits: NaN, saturation, subnormal
// codes and ties included), in vector lanes of each x86-64 level (cpu_act_quant.cpp); out may alias x.
void fp8_quant_dequant_row(const float* x, int64_t n, float* out);

// The reductions below live in cpu_reductions.cpp (attention's weighted values, mHC's mixes and norms).
// out[c] = sum_j p[j] * rows[j][c] for c < len, j summed in order 0..n-1 (float, vectorised over c): the
// one-vector order weighted_rows_sum keeps (its test's reference).
void weighted_row_sum(const float* const* rows, const float* p, int64_t n, int64_t len, float* out);
// The same for nh <= kMaxSumHeads weight vectors at once (attention's heads sharing one key list):
// out[h * ldo + c] = sum_j p[h * ldp + j] * rows[j][c], each (h, c) summed as weighted_row_sum sums it (bit
// for bit), every key row read once for all nh, the sums of a 16-column block kept in registers over all j.
inline constexpr int kMaxSumHeads = 4;
void weighted_rows_sum(const float* const* rows, const float* p, int64_t ldp, int nh, int64_t n, int64_t len,
                       float* out, int64_t ldo);

// Double-precision dot products with a fixed order (8 double lanes, fixed fold; the tail into lanes 0..):
// res[r] = sum_i a[i] * rows[r][i] for r < n_rows, and sumsq(a) = sum_i a[i]^2.
void dot_rows_f64(const float* a, const float* const* rows, int64_t n_rows, int64_t len, double* res);
double sumsq_f64(const float* a, int64_t len);

// One tile of a weight: rows [o0, o0 + nw) (nw <= kTileRows) against nx input rows; res as dot_tile
// (columns k >= nw are unspecified). Dequantises into s.w unless the weight is dense f32.
void weight_tile(const QWeight& w, int64_t o0, int64_t nw, const float* const* x, int64_t nx, CpuScratch& s,
                 float* res);

// The `native` FP8 linear on AVX-512 BF16 machines (cpu_native_fp8.cpp): x rows already quantised per
// 128-column block (ActQuant::kFp8Block128), prepared once per op as bf16 in the kernel's lane order
// (native_fp8_prepare_x: in_dim values), then tiles as weight_tile's (res[r * kTileRows + k]).
bool native_fp8_supported(const QWeight& w);
void native_fp8_prepare_x(const float* x, int64_t in, uint16_t* out);
void native_fp8_tile(const QWeight& w, int64_t o0, int64_t nw, const uint16_t* const* x, int64_t nx,
                     float* res);

// The same for fp4 experts with UE8M0 group scales (cpu_native_fp4.cpp, MoeArgs::act): in_dim a multiple of
// 128; x rows prepared by native_fp4_prepare_x (another lane order than fp8's).
bool native_fp4_supported(const QWeight& w);
void native_fp4_prepare_x(const float* x, int64_t in, uint16_t* out);
void native_fp4_tile(const QWeight& w, int64_t o0, int64_t nw, const uint16_t* const* x, int64_t nx,
                     float* res);

// Linears and experts on the AMX tiles (cpu_amx.cpp): fp8 and fp4 weights converted to bf16 with their
// scales, bf16 weights as they are; x as one bf16 plane where its values are exact in bf16 (the native
// precision's quantised rows) or three (f32 rows: x = hi + mid + lo exactly, each product exact), so both
// precisions keep their meaning. Blocks of 32 weight rows against all token rows. amx_enabled: the machine
// has AMX-BF16 and the OS granted its tile state, and DEEPINFER_CPU_AMX=0 did not turn it off
// (set_amx_enabled: tests, benches). x rows are prepared once per op by amx_prepare_x (planes * nx * in_dim
// values, tokens in groups of 16 as the tiles read them); xf: the same rows in f32, for weight blocks whose
// scales the tiles cannot take. res[r * ldr + (o - o0)] for o in [o0, o1), r < nx; o0 a multiple of 32.
inline constexpr int64_t kAmxRows = 32;  // weight rows per amx_rows block

// Below this many rows of one sequence the AVX-512 kernels read a weight faster than the tiles, which cost a
// conversion through memory per weight row (cpu_ops_bench, V4-Flash q_a on one thread, tiles against AVX-512:
// native 1 row 517 / 402 us, 4 rows 589 / 580, 8 rows 653 / 1209; exact, three planes: 4 rows 663 / 1262).
// The two sum in different orders, so the choice is made per row group (a sequence's rows in the step:
// LinearArgs::row_groups), never per batch.
inline constexpr int64_t kAmxMinRows = 4;
// The routed experts' tiles run per expert on its share of the tokens (k of n_experts each on average), so
// they need larger groups to pay (the mid model's MoE on one thread, prefill chunks of 32 / 64 tokens, tiles
// against AVX-512: native 509 / 473 and 333 / 422 ms; exact 555 / 623 and 354 / 487 ms).
inline int64_t amx_min_tokens(int planes) { return planes == 1 ? 64 : 32; }

// f(first row, rows, amx) over the runs of consecutive row groups of one kernel class (groups of at least
// min_rows rows take the tiles); no groups: all n rows one group.
template <class F>
void for_each_kernel_run(std::span<const int64_t> groups, int64_t n, int64_t min_rows, F&& f) {
    if (groups.empty()) return f(int64_t(0), n, n >= min_rows);
    int64_t r0 = 0, r = 0;
    bool cls = groups[0] >= min_rows;
    for (int64_t g : groups) {
        if ((g >= min_rows) != cls) {
            f(r0, r - r0, cls);
            r0 = r, cls = !cls;
        }
        r += g;
    }
    f(r0, r - r0, cls);
}
bool amx_enabled();
void set_amx_enabled(bool on);
bool amx_supported(const QWeight& w);
// Token rows [t0, t1) of nx (t0 a multiple of 16): the parts of `out` their groups own, so callers may
// prepare groups in parallel and merge the ranges (AmxX::merge).
AmxX amx_prepare_x(const QWeight& w, const float* const* x, int64_t nx, int planes, uint16_t* out,
                   int64_t t0 = 0, int64_t t1 = INT64_MAX);
void amx_rows(const QWeight& w, int64_t o0, int64_t o1, const uint16_t* xv, AmxX xr, const float* const* xf,
              int64_t nx, float* res, int64_t ldr, CpuScratch& s);

}  // namespace di::ops::cpu
