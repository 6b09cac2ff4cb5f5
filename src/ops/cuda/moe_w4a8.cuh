// What the W4A8 MoE kernels share (moe_w4a8.cu: a warpgroup converts and multiplies; moe_w4a8_ws.cu and
// moe_w4a8_bulk_ss.cu: warpgroups specialised to convert or to multiply; moe_w4a8_bulk.cu: tile-ordered
// token rows): the k order of a chunk's bytes, the fp4 -> e4m3 conversion with a group's scale folded in, a
// chunk's promotion, a tile's stores, the launches' operands.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/moe_plan.cuh"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda::w4a8 {

// Element e of a 128-element chunk -> its byte in the wgmma k order: thread q's 16 fp4 bytes are group q
// (elements 32q ..), its word w k-step w, nibbles 0..3 in A register 0 or 1 (k 4q ..), 4..7 in 2 or 3 (k 16
// + 4q ..).
__host__ __device__ constexpr int w8_index(int e) {
    const int q = e >> 5, w = (e >> 3) & 3, m = e & 7;
    return 32 * w + (m < 4 ? 4 * q + m : 16 + 4 * q + (m - 4));
}
static_assert(w8_index(0) == 0 && w8_index(4) == 16 && w8_index(8) == 32 && w8_index(32) == 4 &&
              w8_index(127) == 3 * 32 + 16 + 12 + 3);

// The e4m3 bytes of the e2m1 magnitudes 0, 0.5, 1, 1.5 (lut0) and 2, 3, 4, 6 (lut1) times 2^k, k in [-5, 6]:
// 0.5 x 2^k has the exponent field k + 6 (normal from k = -5), 6 x 2^6 = 384 < 448.
__device__ __forceinline__ void w4a8_lut(int k, uint32_t& lut0, uint32_t& lut1) {
    lut0 = 0x3C383000u + uint32_t(k) * 0x08080800u;
    lut1 = 0x4C484440u + uint32_t(k) * 0x08080808u;
}

// An fp4 word (e2m1 nibbles v0..v7) -> the e4m3 bytes of v0..v3 (lo) and v4..v7 (hi) through the table; the
// signs (nibble bit 3) by prmt's sign-replicating selects: v0, v2's at bits 7, 15 of w << 4, v1, v3's at bits
// 7, 15 of w (v4..v7 the same in the upper half).
__device__ __forceinline__ void fp4x8_to_e4m3(uint32_t w, uint32_t lut0, uint32_t lut1, uint32_t& lo,
                                              uint32_t& hi) {
    const uint32_t mag = w & 0x77777777u, w4 = w << 4;
    uint32_t s_lo, s_hi;
    asm("prmt.b32 %0, %1, %2, 0xD9C8;" : "=r"(s_lo) : "r"(w4), "r"(w));
    asm("prmt.b32 %0, %1, %2, 0xFBEA;" : "=r"(s_hi) : "r"(w4), "r"(w));
    lo = __byte_perm(lut0, lut1, mag) | (s_lo & 0x80808080u);
    hi = __byte_perm(lut0, lut1, mag >> 16) | (s_hi & 0x80808080u);
}

// The largest of a word's four bytes (a chunk's four group scales).
__device__ __forceinline__ int max_byte(uint32_t w) {
    return max(max(int(w & 0xffu), int((w >> 8) & 0xffu)), max(int((w >> 16) & 0xffu), int(w >> 24)));
}

// A weight row's largest scale byte over its `chunks` words at `row` (global or shared memory): the lanes
// q = 0..3 of a quad take every fourth chunk, then the quad agrees. The loads of 8 words go out together: a
// block's prologue is a chain of global round trips with nothing else on the SM to hide them.
__device__ __forceinline__ int row_scale_max(const uint8_t* row, int64_t chunks, int q) {
    uint32_t m4 = 0;  // four bytewise maxima
    constexpr int kLoads = 8;
    for (int64_t c0 = q; c0 < chunks; c0 += 4 * kLoads) {
        uint32_t v[kLoads];
#pragma unroll
        for (int i = 0; i < kLoads; ++i)
            v[i] = c0 + 4 * i < chunks ? *reinterpret_cast<const uint32_t*>(row + 4 * (c0 + 4 * i)) : 0u;
#pragma unroll
        for (int i = 0; i < kLoads; ++i) m4 = __vmaxu4(m4, v[i]);
    }
    int m = max_byte(m4);
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 1));
    return max(m, __shfl_xor_sync(0xffffffffu, m, 2));
}

// 2^(bmax - 127 - 6): what a row's or chunk's sums take back for the fold base bmax (exact: bmax >= 7).
__device__ __forceinline__ float fold_factor(int bmax) { return __int_as_float((bmax - 6) << 23); }

// A thread's 16 fp4 bytes of one weight row's chunk (group q of its four, scale word s4, fold base bmax) as
// the e4m3 A fragments af[k-step][h], af[k-step][2 + h] of its row h (0: row, 1: row + 8).
__device__ __forceinline__ void chunk_frags(const uint4& raw, uint32_t s4, int bmax, int q,
                                            uint32_t (&af)[4][4], int h) {
    uint32_t lut0, lut1;
    w4a8_lut(int((s4 >> (8 * q)) & 0xffu) - bmax + 6, lut0, lut1);
#pragma unroll
    for (int i = 0; i < 4; ++i) fp4x8_to_e4m3(mma::word_of(raw, i), lut0, lut1, af[i][h], af[i][2 + h]);
}

// One weight row's chunk (r[q]: its group q's 16 fp4 bytes, s4 their scales, bmax the fold base) as 128 e4m3
// bytes in w8_index order at `row`, row t of a 128-byte-swizzled tile (16-byte unit u at u ^ (t % 8)).
__device__ __forceinline__ void chunk_row_to_tile(const uint4 (&r)[4], uint32_t s4, int bmax, uint8_t* row,
                                                  int t) {
    uint32_t lo[4][4], hi[4][4];  // [group q][word w]
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        uint32_t lut0, lut1;
        w4a8_lut(int((s4 >> (8 * q)) & 0xffu) - bmax + 6, lut0, lut1);
#pragma unroll
        for (int w = 0; w < 4; ++w) fp4x8_to_e4m3(mma::word_of(r[q], w), lut0, lut1, lo[q][w], hi[q][w]);
    }
    // w8_index order: bytes 32 w + 4 q .. of the row are lo[q][w], 32 w + 16 + 4 q .. hi[q][w]
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        *reinterpret_cast<uint4*>(row + (((2 * w) ^ (t & 7)) * 16)) =
            make_uint4(lo[0][w], lo[1][w], lo[2][w], lo[3][w]);
        *reinterpret_cast<uint4*>(row + (((2 * w + 1) ^ (t & 7)) * 16)) =
            make_uint4(hi[0][w], hi[1][w], hi[2][w], hi[3][w]);
    }
}

// A chunk's sums (part, from wgmma m64nNk32: part[4j + v] is row g + 8 (v >> 1) of the warp's 16, token
// column 8j + 2q + (v & 1)) into the f32 sums acc, times the tokens' scales ts[column] and, unless kRowBase,
// the rows' fold factors rf0, rf1: DeepSeek's promotion every 128.
template <int N, bool kRowBase>
__device__ __forceinline__ void promote_chunk(float (&acc)[N / 2], const float (&part)[N / 2],
                                              const float* ts, int q, float rf0, float rf1) {
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
        const float2 s2 = *reinterpret_cast<const float2*>(ts + 8 * j + 2 * q);
#pragma unroll
        for (int v = 0; v < 4; ++v)
            acc[4 * j + v] =
                fmaf(part[4 * j + v], ((v & 1) ? s2.y : s2.x) * (kRowBase ? 1.0f : ((v >> 1) ? rf1 : rf0)),
                     acc[4 * j + v]);
    }
}

// Chunk c - 1's sums and chunk c's A fragments kept in their registers across the wait for c - 1's wgmmas
// (empty asm: the compiler may not move or reuse them while the tensor cores may still read or write them).
template <int N>
__device__ __forceinline__ void keep_chunk(float (&part)[N / 2], uint32_t (&af)[4][4]) {
#pragma unroll
    for (int v = 0; v < N / 2; ++v) wg::keep(part[v]);
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int v = 0; v < 4; ++v) wg::keep(af[s][v]);
}

// A tile's sums to their outputs: token column ti = i0 + 8j + 2q + cc (those below cnt) at out_of(ti), the
// thread's first row's element (its second 8 further), times the rows' factors f0, f1 where kRowBase, each
// through value(v, sum) for its element v of acc (the sum itself unless given); out_of gives float or
// __nv_bfloat16 pointers (the value rounded to nearest even).
template <int N, bool kRowBase, class OutOf, class Value>
__device__ __forceinline__ void store_tile(const float (&acc)[N / 2], float f0, float f1, int i0, int cnt,
                                           int q, OutOf&& out_of, Value&& value) {
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
            const int ti = i0 + 8 * j + 2 * q + cc;
            if (ti >= cnt) continue;
            auto* const out = out_of(ti);
            const int v0 = 4 * j + cc, v1 = 4 * j + 2 + cc;
            out[0] = value(v0, kRowBase ? acc[v0] * f0 : acc[v0]);
            out[8] = value(v1, kRowBase ? acc[v1] * f1 : acc[v1]);
        }
}
template <int N, bool kRowBase, class OutOf>
__device__ __forceinline__ void store_tile(const float (&acc)[N / 2], float f0, float f1, int i0, int cnt,
                                           int q, OutOf&& out_of) {
    store_tile<N, kRowBase>(acc, f0, f1, i0, cnt, q, out_of, [](int, float x) { return x; });
}

// Timing only (moe_w4a8_probe.cu): where `probe` has bit 256, a zeroed buffer for `blocks` blocks' phase
// counts (W8Io::clocks), else null; one launch's counts printed to stderr (the launch waited for).
long long* probe_clocks(int probe, int64_t blocks, cudaStream_t st);
void print_probe_clocks(long long* clocks, int64_t blocks, bool up, cudaStream_t st);

struct W8Io {
    const uint8_t* act;  // up: token rows; down: pair rows (w8_act_rows)
    const float* sc;     // their scales [rows, chunks]
    float* out;          // up: [pairs, 2 I]; down: y [pairs, D]
    int64_t K, n_out;    // n_out: 2 I (up: W1's rows then W3's) or D
    bool up;
    // Timing only (moe_w4a8_kernel's kProbe form, DEEPINFER_W4A8_PROBE): TiledIo::probe's bits; with bit 256,
    // clocks [blocks][4]: a block's sums of its items' first tiles' phases in cycles, and their count.
    int probe = 0;
    long long* clocks = nullptr;
};

// Rows in tile order (moe_w4a8_bulk.cu): [chunk][rows][128 bytes], the 16-byte unit u of tiled row r at u ^
// (r % 8), scales [chunk][rows]; active expert a's pairs at rows pbegin[a] .., each expert from an 8-row
// boundary, `rows` a multiple of 8 with a tile's 128 rows past the last expert's.
struct TiledOut {
    uint8_t* act;
    float* sc;
    int64_t rows;
    int32_t* pbegin;  // [max active]
    int32_t* prow;    // [pairs]: the tiled row of the plan's pair b
};
struct TiledIo {
    const uint8_t* act;
    const float* sc;
    int64_t rows;
    const int32_t* pbegin;
    float* out;  // up: [plan index, 2 I] (the plan's order); down: y [pairs, D]
    int64_t K, n_out;
    bool up;
    // Timing only (wrong results): parts of the bulk kernel left out, bits 1 the conversion, 2 the promotion,
    // 4 the wgmmas, 8 the weight copies, 16 the token copies, 32 the stores (DEEPINFER_W4A8_BULK_PROBE).
    int probe = 0;
    // bulk_ss: a tile of at most 64 or 96 pairs multiplied by wgmma n64 or n96 instead of n128 (the same
    // sums: the columns past the pairs are not stored; DEEPINFER_W4A8_SS_NARROW)
    bool narrow = false;
    // bulk_ss up pass, kRowBase, two converters: each 128-row tile holds W1's and W3's rows of the same 64
    // columns of h (rows 16 b .. 16 b + 7 of a tile W1's, the next 8 W3's, so a thread's two rows are one
    // column's pair) and out takes h = SwiGLU(W1 part, W3 part) [plan index, I]: the values w8_act_rows'
    // SwiGLU gives from the two parts, half the bytes written and read back (DEEPINFER_W4A8_SS_SWIGLU)
    bool swi_out = false;
    float limit = 0.0f;  // swiglu_limit, with swi_out
    // bulk_ss, kRowBase, two converters, not swi_out: the fp4 rows by TMA through MoeParams::maps where the
    // table has them (DEEPINFER_W4A8_SS_TMA)
    bool tma = false;
    // bulk_ss, kRowBase, two converters, not swi_out: out holds bf16 values (the f32 sums rounded to nearest
    // even), as DeepSeek's expert GEMMs write theirs (DEEPINFER_W4A8_BF16_MID)
    bool bf16_out = false;
};
// Up's token rows to tile order (prow and pbegin written too); grid over `slots` active experts.
void launch_tile_rows(const MoePlan& plan, int32_t k, const uint8_t* xq, const float* xs, int64_t chunks,
                      const TiledOut& t, unsigned slots, cudaStream_t s);
// Whether the bulk kernel's shared memory fits the device at K; its cluster size for n_out rows (at most
// `want`, a power of two: whole clusters of 128-row tiles).
bool bulk_fits(int64_t K);
int bulk_cluster(int64_t n_out, int want);
template <bool kRowBase>
void launch_bulk(const MoeParams& p, const MoePlan& plan, const TiledIo& io, int cluster, cudaStream_t s);
// The same inputs with the weights converted by a warpgroup of their own into shared memory
// (moe_w4a8_bulk_ss.cu; kConv of them); whether its shared memory fits the device.
bool bulk_ss_fits(int conv);
template <bool kRowBase, int kConv>
void launch_bulk_ss(const MoeParams& p, const MoePlan& plan, const TiledIo& io, cudaStream_t s);

// The warp-specialised kernel (moe_w4a8_ws.cu) on the same operands and with the same sums as
// moe_w4a8_kernel's 128-token tiles: kRowBase as there.
template <bool kRowBase>
void launch_ws(const MoeParams& p, const MoePlan& plan, const W8Io& io, unsigned slots, cudaStream_t s);

}  // namespace di::cuda::w4a8
