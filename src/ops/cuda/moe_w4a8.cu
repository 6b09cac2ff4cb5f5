// Routed experts of a prefill as W4A8 on Hopper's FP8 warpgroup tensor cores (native precision; fp4 experts
// whose group scales fold into e4m3: MoeParams::e4m3_ok):
//   x rows:  the chunk's tokens quantised as the activation quantiser does (ops/act_quant.h: e4m3 with a
//            power-of-two scale per 128 elements), each chunk's 128 bytes in the k order of the A fragments
//   up:      g[pair, r] = W1_e[r] . x_t and W3_e[r] . x_t side by side ([pairs, 2 I], f32)
//   h rows:  h = swiglu(W1 part, W3 part) quantised the same way (what moe_quantise_h gives the others)
//   down:    y[pair, c] = W2_e[c] . h[pair]
//   combine: out[t] = sum_j w[t, j] y[t, j] in slot order (launch_moe_combine, moe.cu)
// Block (64-row weight tile, active expert), one warpgroup, m64n128k32 wgmma with A from registers: each
// thread turns its fp4 bytes into e4m3 through a table of the 8 magnitudes per 32-element group, the group's
// scale folded in as 2^k relative to the largest scale of its 128-element chunk, or of its row where the
// whole table allows (e4m3_rows; e2m1 x 2^k is an e4m3 value for k in [-5, 6]: exact), while up to 128 token
// rows come from shared memory in the 128-byte swizzle (one tile holds a 4,096-token chunk's ~96 tokens an
// expert: its weights are converted once). A chunk's four k-steps sum in fresh registers, then join the f32
// sums times the token's scale (and the row's factor, or once at the end with the row base): the tensor cores
// sum FP8 products at reduced precision, promoted every 128 as DeepSeek's kernels do. The conversion of chunk
// c + 1 runs while chunk c's wgmmas do. A product depends on its own token only: deterministic and
// batch-invariant.

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/env_switch.h"
#include "ops/cuda/gemv.cuh"
#include "ops/cuda/hc_streams.cuh"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/moe_plan.cuh"
#include "ops/cuda/moe_w4a8.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {
namespace {

using mma::kChunk;
using w4a8::chunk_frags;
using w4a8::fold_factor;
using w4a8::max_byte;
using w4a8::promote_chunk;
using w4a8::row_scale_max;
using w4a8::store_tile;
using w4a8::w8_index;
using w4a8::W8Io;

constexpr int kThreads = 128;  // a warpgroup
// A chunk's weights for a block of wgs warpgroups: 2 row halves x 16 B a thread, and their scale rows (the
// chunk's 4 group scales).
__host__ __device__ constexpr int w_bytes(int wgs) { return 2 * 16 * kThreads * wgs; }
__host__ __device__ constexpr int wsc_bytes(int wgs) { return 2 * 4 * kThreads * wgs; }
// A stage for N token rows a tile: the rows' chunk (e4m3), the weights, their scales, the rows' scales
// (kOnce: the scales live outside the stages, below).
__host__ __device__ constexpr int tok_bytes(int n) { return n * kChunk; }
__host__ __device__ constexpr int stage_bytes(int n, int wgs, bool once = false) {
    return (tok_bytes(n) + w_bytes(wgs) + (once ? 0 : wsc_bytes(wgs) + n * 4) + 1023) / 1024 * 1024;
}
// kOnce (set_moe_w4a8_scales_once): after the tile's row ids, the block's weight rows' group scales, loaded
// once a block (a row's chunks * 4 bytes, padded by 16 so that a warp's 8 rows lie 4 banks apart), then the
// tile's token scales chunk by chunk ([chunks][N] f32, loaded once a tile). The stages' 4-byte copies of
// them took 32 shared-memory wavefronts each (a line a thread through L1), 38% of the kernel's.
__host__ __device__ constexpr int64_t wsc_row_bytes(int64_t chunks) { return chunks * 4 + 16; }
__host__ __device__ constexpr int64_t once_bytes(int n, int wgs, int64_t chunks) {
    return 64 * wgs * wsc_row_bytes(chunks) + chunks * n * 4;
}
// 89 KB of shared memory at N = 128 and one warpgroup: two blocks an SM; with two warpgroups (the registers
// of one block an SM) six stages, 162 KB.
__host__ __device__ constexpr int stages(int wgs) { return wgs == 1 ? 4 : 6; }

// One block per row, a warp per chunk: the activation quantiser's scale and e4m3 bytes (its rounding and
// saturation), the bytes in w8_index order: lane l's four elements 4l .. 4l + 3 land in one word. kSwiglu:
// the row is [W1 part | W3 part] (2 x chunks x 128) and the values swiglu of the two. Rows 16-byte aligned.
// q [rows, chunks, 128], sc [rows, chunks]; or, where t.act is set, row b (the plan's order) to tiled row
// t.prow[b] (rows past the plan's pairs skipped). In: x's element type, float or __nv_bfloat16 (read in f32).
template <bool kSwiglu, class In = float>
__global__ void __launch_bounds__(128)
    w8_act_rows_kernel(const In* x, int64_t ldx, int64_t chunks, float limit, uint8_t* q, float* sc,
                       w4a8::TiledOut t, MoePlan plan) {
    allow_early_next();
    int64_t r_t = 0;  // the tiled row
    if (t.act != nullptr) {
        if (int(blockIdx.x) >= plan.begin[*plan.n_active]) return;
        r_t = t.prow[blockIdx.x];
    }
    const In* row = x + int64_t(blockIdx.x) * ldx;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t c = warp; c < chunks; c += 4) {
        float4 v = hc::ld4(row + c * kChunk + 4 * lane);
        if constexpr (kSwiglu) {
            const float4 u = hc::ld4(row + (chunks + c) * kChunk + 4 * lane);
            v = make_float4(swiglu_clamped(v.x, u.x, limit), swiglu_clamped(v.y, u.y, limit),
                            swiglu_clamped(v.z, u.z, limit), swiglu_clamped(v.w, u.w, limit));
        }
        const float s = act_quant_scale(warp_block_amax({v.x, v.y, v.z, v.w}));
        auto byte = [s](float f) { return uint32_t(act_quant_e4m3(f, s).__x); };
        const uint32_t word = byte(v.x) | byte(v.y) << 8 | byte(v.z) << 16 | byte(v.w) << 24;
        static_assert(w8_index(4 * 3 + 1) == w8_index(4 * 3) + 1 && w8_index(4 * 3) % 4 == 0);
        const int o = w8_index(4 * lane);
        if (t.act != nullptr) {  // the 16-byte unit o / 16 swizzled by the tiled row
            *reinterpret_cast<uint32_t*>(t.act + (c * t.rows + r_t) * kChunk + (((o >> 4) ^ (r_t & 7)) << 4) +
                                         (o & 15)) = word;
            if (lane == 0) t.sc[c * t.rows + r_t] = s;
        } else {
            *reinterpret_cast<uint32_t*>(q + (int64_t(blockIdx.x) * chunks + c) * kChunk + o) = word;
            if (lane == 0) sc[int64_t(blockIdx.x) * chunks + c] = s;
        }
    }
}

// grid (n_out / (64 kWg), max active experts), 128 kWg threads, stages * stage_bytes (+ alignment, + the
// tile's rows) of dynamic shared memory; N (64 or 128) token rows a tile. kWg warpgroups a block, each its
// own 64 weight rows, share the token rows' stages: with two (the default, set_moe_w4a8_wg2), the tokens come
// from the L2 once for 128 weight rows, the same sums in the same order. kRowBase (MoeParams::e4m3_rows): the
// groups fold relative to the row's largest scale instead of the chunk's, so a chunk's promotion takes the
// token's scale alone and the row's factor multiplies the sums once at the end. kUnits (set_moe_w4a8_units):
// the token rows' copies addressed by 32-bit 16-byte unit offsets kept for the tile (the 64-bit row x chunk
// products per copy took ~10 instructions each: ~80 of a chunk's ~426), the same bytes to the same places.
// kProbe (timing only, wrong results): io.probe's bits leave parts out, as TiledIo::probe's do for the bulk
// kernel, and 64 the block barrier a chunk. kPersist (set_moe_w4a8_persist; kRowBase and kOnce only): a grid
// of one block an SM, each taking items (active expert, column block) from the pass's counter (plan.work) as
// it becomes free; the next item is taken at this item's last tile's first chunk, its plan entries loaded at
// chunk 2 and its weight rows and first pairs at the chunk loop's middle, and the rows' largest scales are
// read from the scales the item copies to shared memory: an item then starts one round trip (its first
// copies) after the last ended, where a block of its own started ~6 dependent round trips after its launch
// (~11,000 cycles of a block's ~61,000 for up's 4,096-token pass on an H100).
// kSwiOut (set_moe_w4a8_swiglu_out; the persistent form's up pass): a block's two warpgroups take W1's and
// W3's rows of the same 64 columns of h, and warpgroup 0 writes h = SwiGLU(W1 part, W3 part) [pairs, I] (W3's
// sums through shared memory) instead of both parts [pairs, 2 I]: the same values (the same products and the
// same SwiGLU of them that the quantiser took from g), half the bytes written and read back.
template <int N, int kWg, bool kRowBase, bool kUnits, bool kOnce, bool kProbe = false, bool kPersist = false,
          bool kSwiOut = false>
__global__ void __launch_bounds__(kThreads* kWg, N == 64 && kWg == 1 ? 3 : 1)
    moe_w4a8_kernel(MoeParams p, MoePlan plan, W8Io io) {
    constexpr int kT = kThreads * kWg, kTokBytes = tok_bytes(N), kStageBytes = stage_bytes(N, kWg, kOnce);
    constexpr int kStages = stages(kWg), kAhead = kStages - 2;  // chunk c - 1's wgmmas read its stage in c
    constexpr int kWBytes = w_bytes(kWg), kWScBytes = wsc_bytes(kWg), kRowsACopy = kT / 8;
    // kProbe with io.clocks: thread 0's cycle counts of the first tile's phases (prologue, chunks, stores)
    long long clk[4] = {0, 0, 0, 0};
    if constexpr (kProbe) {
        clk[0] = clock64();
    }
    static_assert(!kPersist || (kRowBase && kOnce));
    static_assert(!kSwiOut || (kPersist && kWg == 2));
    allow_early_next();
    extern __shared__ __align__(128) uint8_t smem[];
    const int tid = threadIdx.x, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int64_t chunks = io.K / kChunk;
    // this warpgroup's first row of column block col in up's 2 I rows (kSwiOut: W1's, then W3's, 64 col) or
    // down's D
    auto first_row = [&](int col) {
        return kSwiOut && io.up ? int64_t(col) * 64 + (tid / kThreads == 1 ? p.I : 0)
                                : (int64_t(col) * kWg + tid / kThreads) * 64;
    };
    const uint32_t smem0 = (wg::smem_addr(smem) + 1023u) & ~1023u;  // the swizzle's 1024-byte alignment
    uint8_t* const smem_al = smem + (smem0 - wg::smem_addr(smem));
    int32_t* const act_rows = reinterpret_cast<int32_t*>(smem_al + kStages * kStageBytes);  // [N], -1: none
    // [N]: the tile rows' pairs, the rows of out the stores write (read from shared memory at the tile's end:
    // from global memory each store waited for its pair id's round trip)
    int32_t* const out_rows = act_rows + N;
    uint8_t* const wsc_once = reinterpret_cast<uint8_t*>(out_rows + N);  // kOnce: [64 kWg][wsc_row_bytes]
    float* const tsc_once =
        reinterpret_cast<float*>(wsc_once + 64 * kWg * wsc_row_bytes(chunks));  // [chunks][N]
    // kPersist: the item thread 0 took from the pass's counter (plan.work: up's, down's), for the block
    int32_t* const taken = reinterpret_cast<int32_t*>(tsc_once + chunks * N);
    int32_t* const counter = plan.work + (io.up ? 0 : 1);
    // kPersist: the block's items col + cols a (col the column block, a the active expert), taken in turn
    const int cols = kPersist ? int(io.n_out / (64 * kWg)) : 1;
    const int items = kPersist ? *plan.n_active * cols : 0;
    int item = 0;
    if constexpr (kPersist) {
        if (tid == 0) *taken = atomicAdd(counter, 1);
        __syncthreads();
        item = *taken;
    }
    int a = kPersist ? item / cols : int(blockIdx.y);
    if (kPersist ? item >= items : a >= *plan.n_active) return;
    int e = plan.expert[a], b0 = plan.begin[a], cnt = plan.begin[a + 1] - b0;
    // kPersist: the next item's plan entries, weight rows (data, scale, ld, ld_scale of its table entry) and
    // this thread's pair of its first tile (tid < N; -1: none), loaded during this item's chunk loop
    int n_e = 0, n_b0 = 0, n_cnt = 0, n_pair = -1;
    bool n_ok = false;  // they were (an item without pairs loads its successor's at its start)
    const uint8_t *n_data = nullptr, *n_scale = nullptr;
    int64_t n_ld = 0, n_ld_sc = 0;
    const int c_unit = tid & 7;
    const uint32_t dst0 = uint32_t((tid >> 3) * 128 + ((c_unit ^ ((tid >> 3) & 7)) * 16));
    for (bool first_item = true;; first_item = false) {
        if constexpr (kProbe && kPersist) {  // an item's prologue from the last item's end
            if (!first_item) clk[0] = clock64();
        }
        if constexpr (kPersist) {  // (braced: a #pragma'd loop follows)
            if (!first_item) {
                __syncthreads();  // every warp's reads of the last item's scales and rows are done
                if (n_ok) {
                    e = n_e, b0 = n_b0, cnt = n_cnt;
                } else {
                    a = item / cols;
                    e = plan.expert[a], b0 = plan.begin[a], cnt = plan.begin[a + 1] - b0;
                }
            }
        }
        const int col = kPersist ? item % cols : int(blockIdx.x);
        const int64_t tile0 = first_row(col);  // this warpgroup's first row
        const int m = io.up ? (tile0 < p.I ? 0 : 1) : 2;
        const bool rows_fetched = kPersist && !first_item && n_ok;
        n_ok = false;
        const uint8_t *w_data = n_data, *w_scale = n_scale;
        int64_t ld = n_ld, ld_sc = n_ld_sc;
        if (!rows_fetched) {
            const WeightRef& wr = p.table[3 * e + m];
            w_data = static_cast<const uint8_t*>(wr.data), w_scale = static_cast<const uint8_t*>(wr.scale);
            ld = wr.ld, ld_sc = wr.ld_scale;
        }
        const int64_t row = tile0 - (m == 1 ? p.I : 0) + 16 * warp + g;  // this thread's rows: row, row + 8
        const uint8_t* wp = w_data + row * ld + q * 16;
        const uint8_t* sp = w_scale + row * ld_sc;
        // Token rows in a stage: [tile row n][128 bytes], the 16-byte unit c of row n at c ^ (n % 8); this
        // thread copies unit tid % 8 of rows kRowsACopy i + tid / 8 and row tid's scale.
        // kRowBase: the largest scale byte of rows row and row + 8 (kPersist: from the copies, in step)
        int row_max[2] = {0, 0};
        if constexpr (kRowBase && !kPersist)
#pragma unroll
            for (int h = 0; h < 2; ++h) row_max[h] = row_scale_max(sp + int64_t(h * 8) * ld_sc, chunks, q);
        if constexpr (kOnce) {  // this warpgroup's 64 rows' scales, 16 bytes a copy (waited for with
                                // chunk 0's)
            const int units = int(chunks / 4);  // (32-bit: the division below is in every block's prologue)
            const int64_t first = tile0 - (m == 1 ? p.I : 0);
            const uint8_t* s0 = w_scale + first * ld_sc;
            const uint32_t d0 =
                wg::smem_addr(wsc_once) + uint32_t(tid / kThreads * 64 * wsc_row_bytes(chunks));
            for (int i = tid % kThreads; i < 64 * units; i += kThreads) {
                const int64_t r = i / units, u = i % units;
                wg::cp_async16(d0 + uint32_t(r * wsc_row_bytes(chunks) + u * 16), s0 + r * ld_sc + u * 16,
                               true);
            }
            wg::cp_async_commit();
        }
        // kPersist: the next item, taken at the last tile's first chunks (or after the tiles: none ran)
        bool took = false;
        int next_item = items;
        for (int i0 = 0; i0 < cnt; i0 += N) {
            __syncthreads();  // the previous tile's last reads of the stages and rows are done
            if (tid < N) {
                if (i0 + tid < cnt) {
                    int32_t pair = n_pair;
                    if (!rows_fetched || i0 > 0) pair = plan.pairs[b0 + i0 + tid];
                    act_rows[tid] = io.up ? pair / int32_t(p.k) : pair;
                    out_rows[tid] = pair;
                } else {
                    act_rows[tid] = -1;
                }
            }
            __syncthreads();
            // the tile rows' activation rows (-1: none), or (kUnits) their first 16-byte units row x chunks x
            // 8 + tid % 8 (-1: none; < 2^31 for the pairs and K a pass takes)
            int32_t src_row[N / kRowsACopy];
#pragma unroll
            for (int i = 0; i < N / kRowsACopy; ++i) {
                const int32_t r = act_rows[kRowsACopy * i + (tid >> 3)];
                src_row[i] = kUnits && r >= 0 ? r * int32_t(chunks) * 8 + c_unit : r;
            }
            const float* sc_src =
                io.sc + int64_t(max(act_rows[tid % N], 0)) * chunks;  // row 0's past the tokens
            if constexpr (kOnce) {  // the tile rows' scales chunk-major (rows past the tokens: row 0's), by
                                    // cp.async in a group of their own ahead of the chunks' (waited for with
                                    // chunk 0's copies, read by promote after chunk 1's barrier): loaded one
                                    // by one they were a chain of ~16 round trips a tile with nothing to hide
                                    // it
                for (int e = tid; e < N * int(chunks); e += kT) {
                    const int n = e % N;
                    const int64_t c = e / N;
                    wg::cp_async4(wg::smem_addr(tsc_once + c * N + n),
                                  io.sc + int64_t(max(act_rows[n], 0)) * chunks + c);
                }
                wg::cp_async_commit();
            }
            auto issue = [&](int64_t c) {
                const uint32_t stage = smem0 + uint32_t(c % kStages) * kStageBytes;
#pragma unroll
                for (int i = 0; i < N / kRowsACopy; ++i) {  // rows past the tokens: zeros (the source mapped,
                                                            // not read)
                    if (kProbe && (io.probe & 16)) break;
                    if constexpr (kUnits) {
                        const uint4* base = reinterpret_cast<const uint4*>(io.act) + int32_t(c) * 8;
                        wg::cp_async16(stage + dst0 + i * kRowsACopy * 128,
                                       src_row[i] >= 0 ? base + src_row[i] : base, src_row[i] >= 0);
                    } else {
                        wg::cp_async16(
                            stage + dst0 + i * kRowsACopy * 128,
                            io.act + (int64_t(max(src_row[i], 0)) * chunks + c) * kChunk + c_unit * 16,
                            src_row[i] >= 0);
                    }
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    if (!kProbe || !(io.probe & 8))
                        wg::cp_async16(stage + kTokBytes + (h * kT + tid) * 16,
                                       wp + int64_t(h * 8) * ld + c * 64, true);
                    if constexpr (!kOnce) {  // braced: nvcc 13.0 took a discarded unbraced body's next
                                             // statements
                        wg::cp_async4(stage + kTokBytes + kWBytes + (h * kT + tid) * 4,
                                      sp + int64_t(h * 8) * ld_sc + c * 4);
                    }
                }
                if constexpr (!kOnce) {
                    if (tid < N) wg::cp_async4(stage + kTokBytes + kWBytes + kWScBytes + tid * 4, sc_src + c);
                }
            };
            // Chunk c's weights -> A fragments af[k-step] and the rows' factors 2^(max scale - 6) (rf).
            auto convert = [&](int64_t c, uint32_t(&af)[4][4], float(&rf)[2]) {
                const uint8_t* ws = smem_al + (c % kStages) * kStageBytes + kTokBytes;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const uint4 r = *reinterpret_cast<const uint4*>(ws + (h * kT + tid) * 16);
                    const uint32_t s4 =
                        kOnce ? *reinterpret_cast<const uint32_t*>(
                                    wsc_once +
                                    (tid / kThreads * 64 + 16 * warp + g + 8 * h) * wsc_row_bytes(chunks) +
                                    4 * c)
                              : *reinterpret_cast<const uint32_t*>(ws + kWBytes + (h * kT + tid) * 4);
                    const int bmax = kRowBase ? row_max[h] : max_byte(s4);
                    rf[h] = fold_factor(bmax);
                    if (kProbe && (io.probe & 1)) {
#pragma unroll
                        for (int k = 0; k < 4; ++k) af[k][h] = af[k][2 + h] = mma::word_of(r, k) ^ s4;
                    } else {
                        chunk_frags(r, s4, bmax, q, af, h);
                    }
                }
            };
            float acc[N / 2], part[N / 2];
#pragma unroll
            for (int v = 0; v < N / 2; ++v) acc[v] = 0.0f, part[v] = 0.0f;
            // part[4j + v]: row g + 8 (v >> 1) of the warp's 16, token column 8j + 2q + (v & 1)
            auto promote = [&](int64_t c, const float(&rf)[2]) {
                if (kProbe && (io.probe & 2)) return;
                const float* ts = kOnce
                                      ? tsc_once + c * N
                                      : reinterpret_cast<const float*>(smem_al + (c % kStages) * kStageBytes +
                                                                       kTokBytes + kWBytes + kWScBytes);
                promote_chunk<N, kRowBase>(acc, part, ts, q, rf[0], rf[1]);
            };
            uint32_t af_a[4][4], af_b[4][4];
            float rf_a[2], rf_b[2];
            // chunk c: its copies landed, chunk c + kAhead's issued, its weights converted (in the registers
            // chunk c - 1's wgmmas do not read), chunk c - 1's sums promoted once its wgmmas are done, its
            // own wgmmas issued
            auto step = [&](int64_t c, uint32_t(&af)[4][4], float(&rf)[2], uint32_t(&af_prev)[4][4],
                            const float(&rf_prev)[2]) {
                wg::cp_async_wait<kAhead - 1>();
                wg::fence_proxy_async();
                if (!kProbe || !(io.probe & 64))
                    __syncthreads();  // everyone's copies of chunk c landed; chunk c - 2's stage is free
                if (c + kAhead < chunks) issue(c + kAhead);
                wg::cp_async_commit();
                if constexpr (kPersist) {  // the rows' largest scales, from the copies chunk 0 waited for
                    if (c == 0)
#pragma unroll
                        for (int h = 0; h < 2; ++h)
                            row_max[h] =
                                row_scale_max(wsc_once + (tid / kThreads * 64 + 16 * warp + g + 8 * h) *
                                                             wsc_row_bytes(chunks),
                                              chunks, q);
                }
                convert(c, af, rf);
                if (c > 0) {
                    wg::wait<0>();
                    w4a8::keep_chunk<N>(part, af_prev);
                    promote(c - 1, rf_prev);
                }
                wg::fence();
                const uint32_t stage = smem0 + uint32_t(c % kStages) * kStageBytes;
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    if (kProbe && (io.probe & 4)) break;
                    if constexpr (N == 128)
                        wg::mma_m64n128k32_e4m3(part, af[s], wg::desc_k_major_sw128(stage + s * 32), s);
                    else
                        wg::mma_m64n64k32_e4m3(part, af[s], wg::desc_k_major_sw128(stage + s * 32), s);
                }
                wg::commit();
            };
#pragma unroll
            for (int c = 0; c < kAhead; ++c) {
                if (c < chunks) issue(c);
                wg::cp_async_commit();
            }
            if constexpr (kProbe) {  // (braced: a #pragma'd loop follows)
                if (i0 == 0) clk[1] = clock64();
            }
            const bool last_tile = i0 + N >= cnt;
#pragma unroll 1
            for (int64_t c = 0; c < chunks; c += 2) {
                step(c, af_a, rf_a, af_b, rf_b);
                if (c + 1 < chunks) step(c + 1, af_b, rf_b, af_a, rf_a);
                if constexpr (kPersist) {  // the next item's entries, their round trips under this item's
                                           // chunks
                    if (last_tile && c == 0) {
                        if (tid == 0) *taken = atomicAdd(counter, 1);  // read after chunk 2's barrier
                        took = true;
                    }
                    if (last_tile && c == 2) {
                        next_item = *taken;
                        if (next_item < items) {
                            const int na = next_item / cols;
                            n_e = plan.expert[na], n_b0 = plan.begin[na], n_cnt = plan.begin[na + 1] - n_b0;
                        }
                    }
                    if (last_tile && next_item < items && c == max(int64_t(4), chunks / 2 & ~int64_t(1))) {
                        const int64_t n_tile0 = first_row(next_item % cols);
                        const WeightRef& nw = p.table[3 * n_e + (io.up ? (n_tile0 < p.I ? 0 : 1) : 2)];
                        n_data = static_cast<const uint8_t*>(nw.data),
                        n_scale = static_cast<const uint8_t*>(nw.scale);
                        n_ld = nw.ld, n_ld_sc = nw.ld_scale;
                        n_pair = tid < N && tid < n_cnt ? plan.pairs[n_b0 + tid] : -1;
                        n_ok = true;
                    }
                }
            }
            wg::wait<0>();
            if ((chunks - 1) % 2 == 0) {
                w4a8::keep_chunk<N>(part, af_a);
                promote(chunks - 1, rf_a);
            } else {
                w4a8::keep_chunk<N>(part, af_b);
                promote(chunks - 1, rf_b);
            }
            wg::cp_async_wait<0>();
            if constexpr (kProbe) {
                if (i0 == 0) clk[2] = clock64();
            }
            // kRowBase: the rows' factors 2^(row max - 127 - 6), exact (row max >= 7: e4m3_fold_kernel)
            if constexpr (kSwiOut) {
                // W3's values (warpgroup 1's) to the same thread of warpgroup 0 through the stages (free once
                // both warpgroups' wgmmas are done), element-major: [element v][thread]
                float* const xch = reinterpret_cast<float*>(smem_al);
                const int t = tid % kThreads;
                const float f0 = fold_factor(row_max[0]), f1 = fold_factor(row_max[1]);
                __syncthreads();
                if (tid >= kThreads)
#pragma unroll
                    for (int v = 0; v < N / 2; ++v) xch[v * kThreads + t] = acc[v] * ((v & 2) ? f1 : f0);
                __syncthreads();
                if (tid < kThreads)
                    store_tile<N, kRowBase>(
                        acc, f0, f1, i0, cnt, q,
                        [&](int ti) {
                            return io.out + int64_t(out_rows[ti - i0]) * p.I + tile0 + 16 * warp + g;
                        },
                        [&](int v, float w1) { return swiglu_clamped(w1, xch[v * kThreads + t], p.limit); });
            } else if (!kProbe || !(io.probe & 32)) {
                store_tile<N, kRowBase>(acc, kRowBase ? fold_factor(row_max[0]) : 1.0f,
                                        kRowBase ? fold_factor(row_max[1]) : 1.0f, i0, cnt, q, [&](int ti) {
                                            return io.out + int64_t(out_rows[ti - i0]) * io.n_out + tile0 +
                                                   16 * warp + g;
                                        });
            }
            if constexpr (kProbe) {
                if (i0 == 0 && tid == 0 && io.clocks != nullptr) {
                    clk[3] = clock64();
                    // the block's sums over its items' first tiles (kPersist: several), and their count
                    long long* const o = io.clocks + (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * 4;
                    for (int k = 0; k < 3; ++k) o[k] += clk[k + 1] - clk[k];
                    o[3] += 1;
                }
            }
        }
        if constexpr (kOnce) {
            wg::cp_async_wait<0>();  // the scales' copies, where no tile waited for them (an expert without
                                     // pairs)
        }
        if constexpr (!kPersist) {
            break;
        } else {
            if (!took) {
                __syncthreads();  // every thread's read of the last item taken is done
                if (tid == 0) *taken = atomicAdd(counter, 1);
                __syncthreads();
                next_item = *taken;
            }
            if (next_item >= items) break;
            item = next_item;
        }
    }
}

bool units_enabled = std::getenv("DEEPINFER_W4A8_UNITS") != nullptr;

bool n64_enabled = std::getenv("DEEPINFER_W4A8_N64") != nullptr;

bool ws_enabled = std::getenv("DEEPINFER_W4A8_WS") != nullptr;

// The bulk-copy kernel's cluster size (moe_w4a8_bulk.cu; 0: off, the default: the same bits, measured 9%
// slower alone and slower still in clusters): DEEPINFER_W4A8_BULK=1|2|4.
int bulk_cs = int(env_int("DEEPINFER_W4A8_BULK", 0));
const int bulk_probe = int(env_int("DEEPINFER_W4A8_BULK_PROBE", 0));
// The default kernel's timing probes (W8Io::probe; the row-base, scales-once, two-warpgroup form only); bit
// 256: each launch's blocks' first-tile phases in cycles, printed to stderr (the launch waited for).
const int w4a8_probe = int(env_int("DEEPINFER_W4A8_PROBE", 0));

// The bulk kernel's inputs with the weights converted by warpgroups of their own (moe_w4a8_bulk_ss.cu), two
// of them with the narrow tiles: the default where it applies since 2026-12-06 (H100, 4 layers, MoE ms: 4,096
// tokens 15.28 / 15.21 against the persistent default's 15.94 / 15.98, 32,768 tokens 116.8 / 117.2 against
// 120.5 / 120.0; two converters without the narrow tiles 16.10 / 123.3, one with them 17.24 in a build whose
// one-converter wgmmas ptxas serialised; the default's bits in CudaMoeW4a8.OptionsMatchTheReference).
// DEEPINFER_W4A8_BULK_SS=0 runs moe_w4a8_kernel (its options below), 1 one converting warpgroup;
// DEEPINFER_W4A8_SS_NARROW=0 every tile by n128.
int bulk_ss = int(env_int("DEEPINFER_W4A8_BULK_SS", 2));
bool ss_narrow = env_int("DEEPINFER_W4A8_SS_NARROW", 1) != 0;
bool ss_swiglu = env_switch("DEEPINFER_W4A8_SS_SWIGLU", false);
std::atomic<int64_t> ss_swiglu_launches{0};
bool ss_tma = env_switch("DEEPINFER_W4A8_SS_TMA", false);
std::atomic<int64_t> ss_tma_launches{0};
// The experts' up and down sums stored as bf16 (TiledIo::bf16_out), read back by h's quantiser and the
// combine: off until measured (DEEPINFER_W4A8_BF16_MID=1; kernels.h says what it changes).
bool bf16_mid = env_switch("DEEPINFER_W4A8_BF16_MID", false);
std::atomic<int64_t> bf16_mid_launches{0};
std::atomic<int64_t> bulk_launches{0};

// Where set and the pass allows: whole 16-byte scale rows (the unit's scales copied a row at a time), and the
// kernel's shared memory within the device's at both K. (Its n_out need only be a multiple of 128.)
bool bulk_applies(const MoeParams& p) {
    if (!p.scales_16b || (p.D / kChunk) % 4 != 0 || (p.I / kChunk) % 4 != 0) return false;
    return bulk_ss > 0 ? w4a8::bulk_ss_fits(bulk_ss) : bulk_cs > 0 && w4a8::bulk_fits(std::max(p.D, p.I));
}

// On unless DEEPINFER_W4A8_SCALES_IN_STAGES is set (H100, 4,096 tokens: 3,743 against 4,291 us; 2,730:
// 3,426 against 3,934; skewed routing 4,308 against 5,042; docs/benchmarks.md).
bool once_enabled = std::getenv("DEEPINFER_W4A8_SCALES_IN_STAGES") == nullptr;
std::atomic<int64_t> once_launches{0};  // the rank threads of expert parallelism launch at once

template <int N, int kWg, bool kOnce>
int64_t smem_bytes(int64_t chunks) {  // + the swizzle's alignment, + the rows and pairs, + kOnce's scales
    return stages(kWg) * stage_bytes(N, kWg, kOnce) + 1024 + 2 * N * 4 +
           (kOnce ? once_bytes(N, kWg, chunks) + 16 : 0);
}

// On unless DEEPINFER_W4A8_WG1 is set (H200: 4,096-token chunk 4,266 against 4,288 us, 2,730 4,015 against
// 4,083, skewed routing 4,964 against 5,085; docs/benchmarks.md).
bool wg2_enabled = std::getenv("DEEPINFER_W4A8_WG1") == nullptr;

// The kernel's kPersist form: on unless DEEPINFER_W4A8_PERSIST=0 (H100, 4 layers: the 4,096-token MoE 16.37
// against 16.01 ms over three runs each, 32,768 tokens 122.6 against 120.5; docs/benchmarks.md).
bool persist_enabled = env_switch("DEEPINFER_W4A8_PERSIST", true);
std::atomic<int64_t> persist_launches{0};
// The kSwiOut form for up (the persistent form's SwiGLU in its epilogue): off unless
// DEEPINFER_W4A8_SWIGLU_OUT is set (the default's bits, but the 4-layer MoE 26% slower on an H100: 20.07
// against 15.98 ms at 4,096 tokens, 151.7 against 120.2 at 32,768; docs/benchmarks.md).
bool swi_out_enabled = env_switch("DEEPINFER_W4A8_SWIGLU_OUT", false);
std::atomic<int64_t> swi_out_launches{0};

// slots: the grid's y (the active experts' bound); kPersist: a block an SM (as many as there are items at
// most)
template <int N, int kWg, bool kRowBase, bool kUnits, bool kOnce = false, bool kProbe = false,
          bool kPersist = false, bool kSwiOut = false>
void launch_kernel(const MoeParams& p, const MoePlan& plan, const W8Io& io, unsigned slots, cudaStream_t s) {
    const int64_t smem = smem_bytes<N, kWg, kOnce>(io.K / kChunk);
    raise_dynamic_smem(moe_w4a8_kernel<N, kWg, kRowBase, kUnits, kOnce, kProbe, kPersist, kSwiOut>,
                       size_t(smem));
    if (kOnce) ++once_launches;
    if (kPersist) ++persist_launches;
    const unsigned cols = unsigned(io.n_out / (64 * kWg));
    const dim3 grid = kPersist ? dim3(std::min(unsigned(sm_count()), cols * slots)) : dim3(cols, slots);
    if (kSwiOut) ++swi_out_launches;
    moe_w4a8_kernel<N, kWg, kRowBase, kUnits, kOnce, kProbe, kPersist, kSwiOut>
        <<<grid, kThreads * kWg, size_t(smem), s>>>(p, plan, io);
}

// kOnce where set and the pass allows: 16-byte scale rows (whole 16-byte units: chunks a multiple of 4) and
// the scales within the device's shared memory.
template <int N, int kWg>
bool once_applies(const MoeParams& p, const W8Io& io) {
    const int64_t chunks = io.K / kChunk;
    return once_enabled && N == 128 && p.scales_16b && chunks % 4 == 0 &&
           size_t(smem_bytes<N, kWg, true>(chunks)) <= smem_optin();
}

// Each launcher below returns whether the pass wrote h = SwiGLU of up's two parts [pairs, I] (the persistent
// form's up pass with set_moe_w4a8_swiglu_out) rather than both parts [pairs, 2 I].
template <int N, int kWg>
bool launch_wg(const MoeParams& p, const MoePlan& plan, const W8Io& io, unsigned slots, cudaStream_t s) {
    if constexpr (N == 128) {
        if (once_applies<N, kWg>(p, io)) {
            if constexpr (kWg == 2) {  // (the probe, persistent and SwiGLU-out forms: this form alone)
                if (p.e4m3_rows && io.probe != 0) {
                    persist_enabled
                        ? launch_kernel<N, kWg, true, false, true, true, true>(p, plan, io, slots, s)
                        : launch_kernel<N, kWg, true, false, true, true>(p, plan, io, slots, s);
                    return false;
                }
                if (p.e4m3_rows && persist_enabled) {
                    const bool swi = io.up && swi_out_enabled;
                    if (swi)
                        units_enabled ? launch_kernel<N, kWg, true, true, true, false, true, true>(
                                            p, plan, io, slots, s)
                                      : launch_kernel<N, kWg, true, false, true, false, true, true>(
                                            p, plan, io, slots, s);
                    else
                        units_enabled
                            ? launch_kernel<N, kWg, true, true, true, false, true>(p, plan, io, slots, s)
                            : launch_kernel<N, kWg, true, false, true, false, true>(p, plan, io, slots, s);
                    return swi;
                }
            }
            p.e4m3_rows ? launch_kernel<N, kWg, true, false, true>(p, plan, io, slots, s)
                        : launch_kernel<N, kWg, false, false, true>(p, plan, io, slots, s);
            return false;
        }
    }
    if (p.e4m3_rows)
        units_enabled ? launch_kernel<N, kWg, true, true>(p, plan, io, slots, s)
                      : launch_kernel<N, kWg, true, false>(p, plan, io, slots, s);
    else
        units_enabled ? launch_kernel<N, kWg, false, true>(p, plan, io, slots, s)
                      : launch_kernel<N, kWg, false, false>(p, plan, io, slots, s);
    return false;
}

// Two warpgroups a block where set and the pass's rows come in 128s (up's 2 I, down's D).
template <int N>
bool launch_n(const MoeParams& p, const MoePlan& plan, const W8Io& io, unsigned slots, cudaStream_t s) {
    return wg2_enabled && io.n_out % 128 == 0 ? launch_wg<N, 2>(p, plan, io, slots, s)
                                              : launch_wg<N, 1>(p, plan, io, slots, s);
}

bool use_n64(const MoeParams& p, unsigned slots) { return n64_enabled && p.n * p.k <= 64 * int64_t(slots); }

// 64-row tiles where an expert averages at most 64 of the pass's pairs (set_moe_w4a8_n64: off until
// measured); 128-row tiles on the warp-specialised kernel where set (set_moe_w4a8_ws: off, slower);
// otherwise 128-row tiles.
bool launch_tiles(const MoeParams& p, const MoePlan& plan, const W8Io& io, unsigned slots, cudaStream_t s) {
    if (use_n64(p, slots)) return launch_n<64>(p, plan, io, slots, s);
    if (!ws_enabled) return launch_n<128>(p, plan, io, slots, s);
    p.e4m3_rows ? w4a8::launch_ws<true>(p, plan, io, slots, s)
                : w4a8::launch_ws<false>(p, plan, io, slots, s);
    return false;
}

}  // namespace

void set_moe_w4a8_units(bool on) { units_enabled = on; }
void set_moe_w4a8_n64(bool on) { n64_enabled = on; }
void set_moe_w4a8_ws(bool on) { ws_enabled = on; }
void set_moe_w4a8_bulk(int cluster) { bulk_cs = cluster; }
void set_moe_w4a8_bulk_ss(int conv, bool narrow) { bulk_ss = std::clamp(conv, 0, 2), ss_narrow = narrow; }
int moe_w4a8_bulk_ss() { return bulk_ss; }
void set_moe_w4a8_ss_swiglu(bool on) { ss_swiglu = on; }
int64_t moe_w4a8_ss_swiglu_launches() { return ss_swiglu_launches.load(); }
void set_moe_w4a8_ss_tma(bool on) { ss_tma = on; }
int64_t moe_w4a8_ss_tma_launches() { return ss_tma_launches.load(); }
void set_moe_w4a8_bf16_mid(bool on) { bf16_mid = on; }
int64_t moe_w4a8_bf16_mid_launches() { return bf16_mid_launches.load(); }
bool moe_w4a8_ss_narrow() { return ss_narrow; }
int64_t moe_w4a8_bulk_launches() { return bulk_launches.load(); }
void set_moe_w4a8_wg2(bool on) { wg2_enabled = on; }
void set_moe_w4a8_persist(bool on) { persist_enabled = on; }
int64_t moe_w4a8_persist_launches() { return persist_launches.load(); }
void set_moe_w4a8_swiglu_out(bool on) { swi_out_enabled = on; }
int64_t moe_w4a8_swiglu_out_launches() { return swi_out_launches.load(); }
void set_moe_w4a8_scales_once(bool on) { once_enabled = on; }
bool moe_w4a8_scales_once() { return once_enabled; }
bool moe_w4a8_persist() { return persist_enabled; }
int64_t moe_w4a8_scales_once_launches() { return once_launches.load(); }

// w4a8 from 20 pairs an expert: its 128-token tiles convert an expert's weights once a tile, so with few
// enough tokens an expert wgmma is faster (H200, 2026-12-03, the kernels of then: 512 tokens, 12 pairs an
// expert, wgmma 2,455 us against w4a8 3,772). With the converting kernel (H100, 2026-12-07, 4 V4-Flash
// layers, a 16K prompt in chunks): 2,048-token chunks (48 pairs an expert) 86.1K tokens/s on wgmma,
// 104.3K-104.8K on w4a8; 1,024-token chunks (24) 61.4K / 61.7K against 70.1K / 70.1K. Was 64.
// DEEPINFER_W4A8_MIN_PAIRS sets it (A/B timing).
const int64_t w4a8_min_pairs = env_int("DEEPINFER_W4A8_MIN_PAIRS", 20);

bool moe_w4a8_supported(const MoeParams& p, bool forced) {
    const int64_t pairs = p.n * p.k;
    return p.act_fp8 && p.e4m3_ok && p.scales_4b && p.gemv_format == gemv::kFp4 && p.D % kChunk == 0 &&
           p.ld_x % 4 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.I % kChunk == 0 &&
           pairs <= kMoeGemmMaxPairs &&
           (forced || (pairs >= kMoeGemmMinPairs && pairs >= w4a8_min_pairs * p.n_experts));
}

void launch_moe_w4a8(const MoeParams& p, Scratch& scratch, Stream s) {
    const cudaStream_t st = as_stream(s);
    const int64_t pairs = p.n * p.k, xc = p.D / kChunk, hc = p.I / kChunk;
    const unsigned slots = unsigned(std::min(pairs, p.n_experts));
    float* g = static_cast<float*>(scratch.get(1, size_t(pairs * 2 * p.I) * sizeof(float)));
    float* y = p.y_out ? p.y_out : static_cast<float*>(scratch.get(2, size_t(pairs * p.D) * sizeof(float)));
    // e4m3 rows of x [n, D] and h [pairs, I], then their scales (offsets multiples of 128 bytes)
    auto* bytes = static_cast<uint8_t*>(
        scratch.get(8, size_t(p.n * p.D + pairs * p.I) + size_t(p.n * xc + pairs * hc) * sizeof(float)));
    uint8_t* xq = bytes;
    uint8_t* hq = bytes + p.n * p.D;
    float* xs = reinterpret_cast<float*>(hq + pairs * p.I);
    float* hs = xs + p.n * xc;
    const MoePlan plan = moe_plan_buffers(scratch, pairs, slots);
    launch_moe_plan(p, plan, st);
    w8_act_rows_kernel<false><<<unsigned(p.n), 128, 0, st>>>(p.x, p.ld_x, xc, p.limit, xq, xs, {}, plan);
    if (bulk_applies(p)) {
        // tile-ordered rows: each expert's from an 8-row boundary, a tile's rows past the last
        const int64_t rows = (pairs + 7 * int64_t(slots) + 128 + 7) / 8 * 8;
        auto* tb = static_cast<uint8_t*>(scratch.get(15, size_t(rows * (p.D + p.I)) +
                                                             size_t(rows * (xc + hc)) * sizeof(float) +
                                                             size_t(slots + pairs) * sizeof(int32_t)));
        float* xts = reinterpret_cast<float*>(tb + rows * (p.D + p.I));
        int32_t* pbegin = reinterpret_cast<int32_t*>(xts + rows * (xc + hc));
        const w4a8::TiledOut xt{tb, xts, rows, pbegin, pbegin + slots};
        const w4a8::TiledOut ht{tb + rows * p.D, xts + rows * xc, rows, pbegin, pbegin + slots};
        w4a8::launch_tile_rows(plan, int32_t(p.k), xq, xs, xc, xt, slots, st);
        ++bulk_launches;
        auto bulk = [&](const w4a8::TiledIo& io) {
            if (bulk_ss == 2)
                p.e4m3_rows ? w4a8::launch_bulk_ss<true, 2>(p, plan, io, st)
                            : w4a8::launch_bulk_ss<false, 2>(p, plan, io, st);
            else if (bulk_ss == 1)
                p.e4m3_rows ? w4a8::launch_bulk_ss<true, 1>(p, plan, io, st)
                            : w4a8::launch_bulk_ss<false, 1>(p, plan, io, st);
            else
                p.e4m3_rows ? w4a8::launch_bulk<true>(p, plan, io, bulk_cs, st)
                            : w4a8::launch_bulk<false>(p, plan, io, bulk_cs, st);
        };
        // up's SwiGLU in the converting kernel's epilogue (its kRowBase form, two converters): g holds h
        const bool swi = ss_swiglu && bulk_ss == 2 && p.e4m3_rows;
        // the fp4 rows by TMA where the table has its maps (launch_bulk_ss takes it on that form only)
        const bool tma = ss_tma && bulk_ss == 2 && p.e4m3_rows && p.maps != nullptr;
        // bf16 sums on that form where the combine reads them here (not expert parallelism's slots)
        const bool mid16 = bf16_mid && bulk_ss == 2 && p.e4m3_rows && !swi && p.y_out == nullptr &&
                           moe_combine_takes_bf16(p);
        w4a8::TiledIo up{xt.act, xt.sc, rows, pbegin, g, p.D, 2 * p.I, true, bulk_probe, ss_narrow};
        up.swi_out = swi, up.limit = p.limit, up.tma = tma && !swi, up.bf16_out = mid16;
        ss_tma_launches += int(up.tma) + int(tma);
        bf16_mid_launches += int(mid16);
        bulk(up);
        if (swi) {
            ++ss_swiglu_launches;
            w8_act_rows_kernel<false>
                <<<unsigned(pairs), 128, 0, st>>>(g, p.I, hc, p.limit, nullptr, nullptr, ht, plan);
        } else if (mid16) {
            w8_act_rows_kernel<true, __nv_bfloat16><<<unsigned(pairs), 128, 0, st>>>(
                reinterpret_cast<const __nv_bfloat16*>(g), 2 * p.I, hc, p.limit, nullptr, nullptr, ht, plan);
        } else {
            w8_act_rows_kernel<true>
                <<<unsigned(pairs), 128, 0, st>>>(g, 2 * p.I, hc, p.limit, nullptr, nullptr, ht, plan);
        }
        w4a8::TiledIo down{ht.act, ht.sc, rows, pbegin, y, p.I, p.D, false, bulk_probe, ss_narrow};
        down.tma = tma, down.bf16_out = mid16;
        bulk(down);
        if (mid16) return launch_moe_combine_bf16(p, y, s);
    } else {
        // (probe bit 256: each launch's phase counts; a grid is at most (max(2 I, D) / 64, slots) blocks)
        const int64_t grid = std::max(2 * p.I, p.D) / 64 * int64_t(slots);
        long long* const clocks = w4a8::probe_clocks(w4a8_probe, grid, st);
        const bool h_written =
            launch_tiles(p, plan, W8Io{xq, xs, g, p.D, 2 * p.I, true, w4a8_probe, clocks}, slots, st);
        if (clocks != nullptr) w4a8::print_probe_clocks(clocks, grid, true, st);
        if (h_written)  // g holds h [pairs, I]: the quantiser alone
            w8_act_rows_kernel<false><<<unsigned(pairs), 128, 0, st>>>(g, p.I, hc, p.limit, hq, hs, {}, plan);
        else
            w8_act_rows_kernel<true>
                <<<unsigned(pairs), 128, 0, st>>>(g, 2 * p.I, hc, p.limit, hq, hs, {}, plan);
        launch_tiles(p, plan, W8Io{hq, hs, y, p.I, p.D, false, w4a8_probe, clocks}, slots, st);
        if (clocks != nullptr) w4a8::print_probe_clocks(clocks, grid, false, st);
    }
    if (p.y_out == nullptr) launch_moe_combine(p, y, s);
}

}  // namespace di::cuda
