// Prefill attention of the native precision on the tensor cores (variant `mma64`): head_dim 512, all 64 heads
// of a query in one block, so each key row is staged once per query instead of once per 16 heads (`mma`).
//   key rows:  a first launch turns every row a chunk's queries can reach (the ring's, the chunk's own, the
//              compressed entries) into f16 with its own power-of-two scale (max |x| into [2^14, 2^15)), so
//              the blocks copy rows as they are (cp.async, two 32-key tiles in flight) instead of converting
//              f32 rows per tile with a block-wide max and a second pass where the guess missed.
//   block:     (query t, 64 heads), 8 warps; warp w takes heads 16 (w % 4) .. + 15 and head_dim half w / 4
//              (256 columns) of q (f16 A fragments in registers, one scale per block) and of the output.
//   per tile:  scores on mma.sync m16n8k16 over the warp's half, the two halves added through shared memory
//              (half 0 + half 1: both warps of a pair get the same bits), each key's own scale applied per
//              score column; online softmax from the sink (m = sink, l = 1) in f32; p times 2^14 times
//              2^(T - shift_j) (T: the tile's smallest shift, its largest row) as f16 A fragments against
//              the tile's rows (ldmatrix.trans) into f32 accumulators kept in the scale 2^(14 + T).
// Precision as `mma` with AttentionParams::f16: q, keys and probabilities rounded to f16 (a key row's scale
// is its own instead of its tile's: no coarser). Sums in a fixed order: deterministic; a query's result does
// not depend on the other queries. The key rows' launch is shared; the blocks run attention_wgp.cu's
// pipelined warpgroup kernel by default (set_attention_wgmma), this file's kernel with
// DEEPINFER_ATTN_WGMMA=0.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <utility>
#include <vector>

#include "ops/cuda/attention_decode.h"
#include "ops/cuda/attention_f16_rows.cuh"
#include "ops/cuda/attention_keys.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/env_switch.h"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {
namespace {

using namespace mma;

constexpr int kHd = 512, kHeads = 64, kWarps = 8, kThreads = 32 * kWarps, kHalf = kHd / 2, kKeys = 32;
constexpr int kRow = kHd + 8;   // halves per staged row: ldmatrix rows 16 bytes apart in the banks
constexpr int kSp = kKeys + 8;  // floats per partial-score row: conflict-free float2 stores
constexpr int kStages = 2;      // tiles in flight
constexpr int kStageHalves = kKeys * kRow;

// Rows 8 block .. 8 block + 7 of the call's key rows, a warp a row: 16 floats a lane (four float4), the row's
// max, its shift, the f16 row.
__device__ __forceinline__ void key_rows_block(const AttentionParams& p, const F16Rows& r, int64_t total,
                                               int64_t block) {
    allow_early_next();
    const int lane = threadIdx.x & 31;
    const int64_t row = block * 8 + (threadIdx.x >> 5);
    if (row >= total) return;
    int64_t entry = row - r.ring_rows - p.L;
    if (entry >= 0 && r.picked != nullptr && (entry = r.picked[entry]) < 0) return;  // past the picks
    const float* src = row < r.ring_rows         ? p.ring + row * p.ld_ring
                       : row < r.ring_rows + p.L ? p.kv + (row - r.ring_rows) * p.ld_kv
                                                 : p.comp + entry * p.ld_comp;
    const int sh = warp_row_to_f16<4>(src, r.rows + row * kHd, lane);
    if (lane == 0) r.shift[row] = sh;
}

__global__ void __launch_bounds__(256) key_rows_f16_kernel(AttentionParams p, F16Rows r, int64_t total) {
    key_rows_block(p, r, total, blockIdx.x);
}

// A decode batch's jobs with picks: the entries each reads (query_keys' list), -1 after them. A block a job;
// 2 k ints of dynamic shared memory.
__global__ void __launch_bounds__(256) picks_compact_kernel(const AttentionF16Job* __restrict__ jobs) {
    extern __shared__ int32_t list[];
    const AttentionF16Job& j = jobs[blockIdx.x];
    if (j.r.picked == nullptr) return;
    const int64_t n = query_keys(j.p, 0, list).n_comp;
    for (int64_t c = threadIdx.x; c < j.p.k; c += blockDim.x) j.r.picked[c] = c < n ? list[c] : -1;
}

// Every job's rows of a decode batch: block b is block b - block0 of the last job whose block0 <= b.
__global__ void __launch_bounds__(256)
    key_rows_f16_batch_kernel(const AttentionF16Job* __restrict__ jobs, int64_t count) {
    const int64_t b = blockIdx.x;
    int64_t lo = 0, hi = count - 1;
    while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (jobs[mid].block0 <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    const AttentionF16Job& j = jobs[lo];
    key_rows_block(j.p, j.r, j.total, b - j.block0);
}

__global__ void __launch_bounds__(kThreads, 1) attention_mma64_kernel(AttentionParams p, F16Rows r) {
    allow_early_next();
    extern __shared__ __align__(16) unsigned char smem[];
    __half* tiles = reinterpret_cast<__half*>(smem);                        // [kStages][kKeys][kRow]
    int* tile_sh = reinterpret_cast<int*>(tiles + kStages * kStageHalves);  // [kStages][kKeys]
    float* sp = reinterpret_cast<float*>(tile_sh + kStages * kKeys);        // [2 halves][kHeads][kSp]
    float* red = sp + 2 * kHeads * kSp;                                     // [kWarps]
    int32_t* list = reinterpret_cast<int32_t*>(red + kWarps);               // [2k] picks, then keep flags
    const int64_t t = blockIdx.x, h0 = int64_t(blockIdx.y) * kHeads;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const int hw = 16 * (warp & 3), half = warp >> 2, d0 = half * kHalf;

    const QueryKeys keys = query_keys(p, t, list);
    const int64_t lo = keys.lo, n_win = keys.n_win, n_keys = n_win + keys.n_comp;
    const int64_t n_tiles = (n_keys + kKeys - 1) / kKeys;

    // chunk `tile` into its stage: 32 rows x 64 units of 16 bytes, 8 a thread, and the rows' shifts
    auto issue = [&](int64_t tile) {
        const int st = int(tile % kStages);
        const int64_t j0 = tile * kKeys;
        const uint32_t base = wg::smem_addr(tiles + st * kStageHalves);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int u = tid + kThreads * i, row = u >> 6, unit = u & 63;
            copy_key_unit(p, r, j0 + row, n_keys, lo, n_win, list, unit,
                          base + uint32_t((row * kRow + unit * 8) * 2));
        }
        if (tid < kKeys) tile_sh[st * kKeys + tid] = key_shift(p, r, j0 + tid, n_keys, lo, n_win, list);
    };
    issue(0);
    wg::cp_async_commit();

    // q's A fragments of the warp's heads and half: k-step kk, register v = heads g (+8 for odd v), columns
    // 2q (+8 for v >= 2)
    uint32_t qa[16][4];
    float zs;  // the scores' scale: p.scale / q's
    {
        float2 qv[16][4];
        float qmax = 0.0f;
        const float* qb = p.q + t * p.q_s0 + (h0 + hw) * p.q_s1 + d0;
#pragma unroll
        for (int kk = 0; kk < 16; ++kk)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                qv[kk][v] = *reinterpret_cast<const float2*>(qb + (g + (v & 1) * 8) * p.q_s1 + 16 * kk +
                                                             2 * q + (v >> 1) * 8);
                qmax = fmaxf(qmax, fmaxf(fabsf(qv[kk][v].x), fabsf(qv[kk][v].y)));
            }
        const int shq = chunk_shift(block_max<kWarps>(qmax, red));
        const float s = pow2f(shq);
#pragma unroll
        for (int kk = 0; kk < 16; ++kk)
#pragma unroll
            for (int v = 0; v < 4; ++v) qa[kk][v] = pack_f16x2(qv[kk][v].x * s, qv[kk][v].y * s);
        zs = scalbnf(p.scale, -shq);
    }

    float o[32][4];  // output columns d0 + 8 n + 2q (+1): heads g (0, 1) and g + 8 (2, 3)
#pragma unroll
    for (int n = 0; n < 32; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {p.sinks[h0 + hw + g], p.sinks[h0 + hw + g + 8]}, l[2] = {1.0f, 1.0f};
    int t_prev = 0;  // the accumulators' scale 2^(14 + t_prev)

    for (int64_t tile = 0; tile < n_tiles; ++tile) {
        if (tile + 1 < n_tiles) issue(tile + 1);
        wg::cp_async_commit();
        wg::cp_async_wait<1>();  // this thread's copies of `tile` have landed
        __syncthreads();         // everyone's have (and their shifts are stored)
        const int st = int(tile % kStages);
        const __half* kt = tiles + st * kStageHalves;
        const int* ksh = tile_sh + st * kKeys;

        float s[4][4];  // scores of keys 8 nt + 2q (+1): heads g (0, 1), g + 8 (2, 3)
        // ldmatrix rows: matrix lane / 8 = columns + 8 (odd), keys + 8 (>= 2)
        mma_rows_by_smem_cols(s, qa, kt + ((lane >> 4) * 8 + (lane & 7)) * kRow + d0 + ((lane >> 3) & 1) * 8,
                              kRow);
        float* mine = sp + (half * kHeads + hw) * kSp;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            *reinterpret_cast<float2*>(mine + g * kSp + nt * 8 + 2 * q) = make_float2(s[nt][0], s[nt][1]);
            *reinterpret_cast<float2*>(mine + (g + 8) * kSp + nt * 8 + 2 * q) =
                make_float2(s[nt][2], s[nt][3]);
        }
        // the tile's smallest shift (lane j holds key j's)
        int t_min = ksh[lane];
#pragma unroll
        for (int o2 = 16; o2 > 0; o2 >>= 1) t_min = min(t_min, __shfl_xor_sync(0xffffffffu, t_min, o2));
        __syncthreads();

        const float* h0p = sp + hw * kSp;
        const float* h1p = sp + (kHeads + hw) * kSp;
        int kshift[4][2];  // the shifts of the thread's score columns, and their scales
        float kscale[4][2];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                kshift[nt][c] = ksh[nt * 8 + 2 * q + c];
                kscale[nt][c] = scalbnf(zs, -kshift[nt][c]);
            }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int key = nt * 8 + 2 * q + (v & 1), row = g + (v >> 1) * 8;
                const float sum = h0p[row * kSp + key] + h1p[row * kSp + key];  // half 0 + half 1
                s[nt][v] = tile * kKeys + key < n_keys ? sum * kscale[nt][v & 1] : -INFINITY;
            }
        float f[2];
        online_softmax_tile(s, m, l, f);
        // the accumulators' scale from here: never up (the rescale below then never overflows), and at most
        // this tile's smallest shift (so that no probability exceeds 2^14 in f16)
        const int t_ref = tile == 0 ? t_min : min(t_min, t_prev);
#pragma unroll
        for (int i = 0; i < 2; ++i)
            f[i] = tile == 0 ? 0.0f : scalbnf(f[i], t_ref - t_prev);  // (the accumulators are zero at tile 0)
        t_prev = t_ref;
#pragma unroll
        for (int n = 0; n < 32; ++n) o[n][0] *= f[0], o[n][1] *= f[0], o[n][2] *= f[1], o[n][3] *= f[1];
        // p times 2^14 times 2^(t_ref - shift_j): each key's row scale folded into its probability
        float pf[4][2];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) pf[nt][c] = pow2f(max(14 + t_ref - kshift[nt][c], -126));

#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {  // keys 16 ks .. + 15: score tiles 2 ks and 2 ks + 1
            uint32_t a[4];
            a[0] = pack_f16x2(s[2 * ks][0] * pf[2 * ks][0], s[2 * ks][1] * pf[2 * ks][1]);
            a[1] = pack_f16x2(s[2 * ks][2] * pf[2 * ks][0], s[2 * ks][3] * pf[2 * ks][1]);
            a[2] = pack_f16x2(s[2 * ks + 1][0] * pf[2 * ks + 1][0], s[2 * ks + 1][1] * pf[2 * ks + 1][1]);
            a[3] = pack_f16x2(s[2 * ks + 1][2] * pf[2 * ks + 1][0], s[2 * ks + 1][3] * pf[2 * ks + 1][1]);
            // ldmatrix.trans rows: matrix lane / 8 = keys + 8 (odd), columns + 8 (>= 2)
            const __half* vb =
                kt + (16 * ks + ((lane >> 3) & 1) * 8 + (lane & 7)) * kRow + d0 + (lane >> 4) * 8;
#pragma unroll
            for (int n = 0; n < 32; n += 2) {
                uint32_t b[4];
                ldsm_x4_trans(b, vb + 8 * n);
                mma16816(o[n], a, b[0], b[1]);
                mma16816(o[n + 1], a, b[2], b[3]);
            }
        }
        __syncthreads();  // the stage and the partial scores are free again
    }
    wg::cp_async_wait<0>();
    const float out_scale = scalbnf(1.0f, -(14 + t_prev));
    const float inv[2] = {out_scale / l[0], out_scale / l[1]};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float* dst = p.out + t * p.o_s0 + (h0 + hw + g + 8 * i) * p.o_s1 + d0 + 2 * q;
#pragma unroll
        for (int n = 0; n < 32; ++n)
            *reinterpret_cast<float2*>(dst + 8 * n) =
                make_float2(o[n][2 * i] * inv[i], o[n][2 * i + 1] * inv[i]);
    }
}

size_t smem_bytes(const AttentionParams& p) {
    return size_t(kStages * kStageHalves) * sizeof(__half) + size_t(kStages * kKeys) * sizeof(int) +
           size_t(2 * kHeads * kSp + kWarps) * sizeof(float) +
           size_t(p.comp_mask == AttnCompMask::kPicks ? 2 * p.k : 0) * sizeof(int32_t);
}

int64_t ring_rows(const AttentionParams& p) { return p.n_cached > 0 ? p.window - 1 : 0; }

// 2 by default: the pipelined kernel was faster on every layer kind measured (docs/benchmarks.md)
int wgmma_mode = int(env_int("DEEPINFER_ATTN_WGMMA", 2));

}  // namespace

bool attention_mma64_supported(const AttentionParams& p) {
    auto aligned = [](const void* ptr, int64_t ld) {
        return ptr == nullptr || (reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && ld % 4 == 0);
    };
    return p.f16 && p.hd == kHd && p.H % kHeads == 0 && reinterpret_cast<uintptr_t>(p.q) % 8 == 0 &&
           p.q_s0 % 2 == 0 && p.q_s1 % 2 == 0 && reinterpret_cast<uintptr_t>(p.out) % 8 == 0 &&
           p.o_s0 % 2 == 0 && p.o_s1 % 2 == 0 && aligned(p.ring, p.ld_ring) && aligned(p.kv, p.ld_kv) &&
           aligned(p.comp, p.ld_comp) && (ring_rows(p) == 0 || p.ring != nullptr) &&
           smem_bytes(p) <= 200 * 1024;
}

void launch_attention_mma64(const AttentionParams& p, Scratch& scratch, Stream s) {
    if (p.L == 0) return;
    const cudaStream_t st = as_stream(s);
    const int64_t rr = ring_rows(p), n_comp = p.comp_mask == AttnCompMask::kNone ? 0 : p.n_comp;
    const int64_t total = rr + p.L + n_comp;
    auto* rows = static_cast<__half*>(scratch.get(4, size_t(total) * (kHd * sizeof(__half) + sizeof(int))));
    const F16Rows r{rows, reinterpret_cast<int*>(rows + total * kHd), rr};
    key_rows_f16_kernel<<<unsigned((total + 7) / 8), 256, 0, st>>>(p, r, total);
    const size_t smem = smem_bytes(p);
    raise_dynamic_smem(attention_mma64_kernel, smem);
    if (wgmma_mode == 2 && attention_wgp_fits(p))
        launch_attention_wgp(p, r, st);
    else if (wgmma_mode == 1 && attention_wg_fits(p))
        launch_attention_wg(p, r, st);
    else
        attention_mma64_kernel<<<dim3(unsigned(p.L), unsigned(p.H / kHeads)), kThreads, smem, st>>>(p, r);
}

int set_attention_wgmma(int mode) { return std::exchange(wgmma_mode, mode); }

namespace {
int64_t decode_wgp_min = env_int("DEEPINFER_ATTN_DECODE_WGP_MIN", kAttentionDecodeWgpMinJobs);
std::atomic<int64_t> decode_wgp_launches{0};  // every GPU's thread of an expert-parallel model adds
}  // namespace

int64_t set_attention_decode_wgp_min(int64_t jobs) { return std::exchange(decode_wgp_min, jobs); }
int64_t attention_decode_wgp_min() { return decode_wgp_min; }
int64_t attention_decode_wgp_launches() { return decode_wgp_launches.load(); }

bool attention_decode_wgp_takes(const AttentionParams& p) {
    return p.L == 1 && p.f16 && wgmma_mode == 2 && attention_mma64_supported(p) && attention_wgp_fits(p) &&
           p.qp_pos == nullptr && p.oq == nullptr && p.rope_half <= kAttentionTailMaxHalf;
}

void launch_attention_decode_wgp(const AttentionParams* ps, int64_t count, Scratch& scratch, Stream s) {
    if (count == 0) return;
    const cudaStream_t st = as_stream(s);
    std::vector<AttentionF16Job> jobs(static_cast<size_t>(count));
    int64_t rows = 0, blocks = 0, picked = 0, max_k = 0;
    for (int64_t i = 0; i < count; ++i) {
        const AttentionParams& p = ps[i];
        // a job with picks converts only the entries it reads (at most k), the others all of theirs
        const bool picks = p.comp_mask == AttnCompMask::kPicks;
        const int64_t rr = ring_rows(p), n_comp = picks                                ? p.k
                                                  : p.comp_mask == AttnCompMask::kNone ? 0
                                                                                       : p.n_comp;
        const int64_t total = rr + p.L + n_comp;
        jobs[size_t(i)] = {p, F16Rows{nullptr, nullptr, rr}, total, blocks};
        rows += total, blocks += (total + 7) / 8;
        if (picks) picked += p.k, max_k = std::max(max_k, p.k);
    }
    // scratch 4: the table (256-byte aligned), every job's f16 rows, their shifts, the picked entries
    const size_t table = (size_t(count) * sizeof(AttentionF16Job) + 255) / 256 * 256;
    auto* base = static_cast<uint8_t*>(scratch.get(
        4, table + size_t(rows) * (kHd * sizeof(__half) + sizeof(int)) + size_t(picked) * sizeof(int32_t)));
    auto* f16 = reinterpret_cast<__half*>(base + table);
    int* shifts = reinterpret_cast<int*>(f16 + rows * kHd);
    int32_t* sel = shifts + rows;
    int64_t at = 0;
    for (AttentionF16Job& j : jobs) {
        j.r.rows = f16 + at * kHd, j.r.shift = shifts + at;
        at += j.total;
        if (j.p.comp_mask == AttnCompMask::kPicks) j.r.picked = sel, sel += j.p.k;
    }
    auto* dev = reinterpret_cast<AttentionF16Job*>(base);
    DI_CUDA_CHECK(cudaMemcpyAsync(dev, jobs.data(), jobs.size() * sizeof(AttentionF16Job),
                                  cudaMemcpyHostToDevice, st));  // pageable: staged before the call returns
    if (picked > 0) {
        const size_t smem = size_t(2 * max_k) * sizeof(int32_t);
        raise_dynamic_smem(picks_compact_kernel, smem);
        picks_compact_kernel<<<unsigned(count), 256, smem, st>>>(dev);
    }
    key_rows_f16_batch_kernel<<<unsigned(blocks), 256, 0, st>>>(dev, count);
    launch_attention_wgp_batch(dev, jobs.data(), count, st);
    ++decode_wgp_launches;
}

bool attention_mma64_takes_tail(const AttentionParams& p) {
    const bool qb_aligned =
        p.qb == nullptr || (reinterpret_cast<uintptr_t>(p.qb) % 16 == 0 && p.q_s0 % 8 == 0 &&
                            p.q_s1 % 8 == 0);  // 16-byte loads of 8 values
    return wgmma_mode == 2 && attention_mma64_supported(p) && attention_wgp_fits(p) && qb_aligned &&
           p.qp_half <= kAttentionTailMaxHalf && p.rope_half <= kAttentionTailMaxHalf;
}

}  // namespace di::cuda
