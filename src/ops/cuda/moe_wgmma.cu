// Routed experts of a prefill on Hopper's warpgroup tensor cores (fp4 experts, many tokens per expert):
//   plan:      the pairs grouped by expert (moe_plan.cuh)
//   x rows:    the chunk's tokens as f16 (hi, and lo in exact precision) with one power-of-two scale per row,
//              each 128-element chunk in the k order of the weights' A fragments (wg_act_rows)
//   up:        h[pair, r] = swiglu(W1_e[r] . x_t, W3_e[r] . x_t)
//   h rows:    h the same way, one scale per pair
//   down:      y[pair, c] = W2_e[c] . h[pair]
//   combine:   out[t] = sum_j w[t, j] y[t, j] in slot order (launch_moe_combine, moe.cu)
// Block (row tile, active expert), one warpgroup: 64 rows of each of its NM x MT weight tiles times 64 B rows
// (64 tokens' hi halves, or 32 tokens' hi and lo) per wgmma m64n64k16. Each 128-element chunk's token rows,
// weight bytes and group scales come into shared memory by cp.async, three chunks ahead; each thread turns
// its own weight bytes into the A fragments in registers (mma_frag.cuh: the fp4 group scale folded into the
// f16 weights, exact for the scales mma_ok admits) and wgmma reads the token rows from shared memory, stored
// in the 128-byte swizzle (unswizzled, the tensor cores' reads of them collided in the banks: 1.23x slower,
// docs/benchmarks.md). With one scale per row a product sums a row's chunks directly and depends only on its
// own token: deterministic and batch-invariant.
#include <algorithm>

#include "ops/cuda/gemv.cuh"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/moe_plan.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {
namespace {

using namespace mma;

constexpr int kThreads = 128;                  // one warpgroup
constexpr int kRows = 64;                      // B rows (token halves) per tile
constexpr int kTokBytes = kRows * kChunk * 2;  // a stage's token rows (f16)
constexpr int kWBytes = 4 * 16 * kThreads;     // its weights: 4 (matrix, tile, row half) x 16 B a thread
constexpr int kScBytes = 4 * 4 * kThreads;     // their scale rows: 4 x 4 group scales a thread
constexpr int kStageBytes = kTokBytes + kWBytes + kScBytes;
// chunks in flight (105 KB of shared memory: two blocks an SM; two stages and three blocks an SM measured no
// faster, nor did two warpgroups a block over 128 token rows: docs/benchmarks.md)
constexpr int kStages = 4;

// Element e of a 128-element chunk -> its f16 index in the wgmma order: k-step s (16 elements each) and place
// kk in the step such that the weights' fp4 nibbles (thread q's 16 bytes: word i, nibble m) meet it in A:
// e = 32 q + 8 i + m  ->  s = 2 i + ((m >> 1) & 1), kk = 2 q + 8 (m & 1) + (m >> 2).
__host__ __device__ constexpr int wg_index(int e) {
    const int q = e >> 5, i = (e & 31) >> 3, m = e & 7;
    return (2 * i + ((m >> 1) & 1)) * 16 + 2 * q + 8 * (m & 1) + (m >> 2);
}

// One block per row: the row's max, one shift for the row, then each chunk's 128 f16 (hi, then lo when kLo)
// in wg_index order. data [rows, chunks, kLo ? 2 : 1, 64 words], inv [rows] (1/s).
template <bool kLo>
__global__ void __launch_bounds__(128)
    wg_act_rows_kernel(const float* x, int64_t ldx, int64_t chunks, uint32_t* data, float* inv) {
    allow_early_next();
    const float* row = x + int64_t(blockIdx.x) * ldx;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __shared__ float red[4];
    const int sh = row_shift<4>(row, chunks * kChunk, red);
    const float s = __int_as_float((127 + sh) << 23);
    constexpr int64_t kWords = kLo ? 128 : 64;
    __half* dst = reinterpret_cast<__half*>(data + int64_t(blockIdx.x) * chunks * kWords);
    for (int64_t c = warp; c < chunks; c += 4) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int e = 32 * j + lane;
            const float xs = row[c * kChunk + e] * s;
            const __half hi = __float2half_rn(xs);
            dst[c * kWords * 2 + wg_index(e)] = hi;
            if (kLo) dst[c * kWords * 2 + 128 + wg_index(e)] = __float2half_rn(xs - __half2float(hi));
        }
    }
    if (threadIdx.x == 0) inv[blockIdx.x] = __int_as_float((127 - sh) << 23);
}

struct WgIo {
    const uint32_t* act;  // up: token rows; down: pair rows (wg_act_rows)
    const float* inv;     // 1/s per row
    float* out;           // up: h [pairs, I]; down: y [pairs, D]
    int64_t K, n_out;
};

// grid (n_out / (64 MT), max active experts), 128 threads, kStages * kStageBytes of dynamic shared memory.
// NM = 2: up (W1, W3, swiglu), MT = 1; NM = 1: down (W2), MT = 2. kLo: B row 2t is token t's hi half and row
// 2t + 1 its lo half (32 tokens a tile); else 64 tokens' hi halves (quantised activations: lo is zero).
template <int NM, int MT, bool kLo>
__global__ void __launch_bounds__(kThreads, 1) moe_wgmma_kernel(MoeParams p, MoePlan plan, WgIo io) {
    allow_early_next();
    extern __shared__ __align__(128) uint8_t smem[];
    const int a = blockIdx.y;
    if (a >= *plan.n_active) return;
    const int e = plan.expert[a], b0 = plan.begin[a], cnt = plan.begin[a + 1] - b0;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    constexpr int kTok = kLo ? kRows / 2 : kRows;
    constexpr int64_t kWords = kLo ? 128 : 64;  // u32 per (row, chunk)
    const int64_t row0 = int64_t(blockIdx.x) * (64 * MT) + 16 * warp;
    const int64_t chunks = io.K / kChunk;
    const ExpertRows<NM> rows = expert_rows<NM>(p, e, row0 + g, q);  // scale rows: a chunk's 4 group scales
    const uint8_t* const* wp = rows.w;
    const uint8_t* const* sp = rows.sc;
    const int64_t ld = rows.ld, ld_sc = rows.ld_sc;
    // The tile's token rows in a stage: K-major with the 128-byte swizzle, [K half kc][tile row n][128
    // bytes], the 16-byte unit c of a row at c ^ (n % 8) (rows read by the tensor cores in one go then spread
    // over all banks). This thread copies units c = tid % 8 of tile rows n = 16 i + tid / 8 (i < 4), both K
    // halves: a warp's copies read 128 contiguous bytes of each of 4 rows and fill 512 contiguous bytes.
    const uint32_t smem0 = (wg::smem_addr(smem) + 1023u) & ~1023u;  // the swizzle's 1024-byte alignment
    uint8_t* const smem_al = smem + (smem0 - wg::smem_addr(smem));
    const int c_unit = tid & 7;
    for (int i0 = 0; i0 < cnt; i0 += kTok) {
        const uint8_t* src[4];
        bool valid[4];
        uint32_t dst[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int n = 16 * i + (tid >> 3), ti = i0 + (kLo ? n >> 1 : n);
            valid[i] = ti < cnt;
            src[i] = reinterpret_cast<const uint8_t*>(io.act);  // mapped, not read, where !valid
            if (valid[i]) {
                const int32_t pair = plan.pairs[b0 + ti];
                const int64_t row = NM == 2 ? pair / p.k : pair;
                src[i] = reinterpret_cast<const uint8_t*>(io.act + row * chunks * kWords +
                                                          (kLo ? (n & 1) * 64 : 0)) +
                         c_unit * 16;
            }
            dst[i] = uint32_t(n * 128 + ((c_unit ^ (n & 7)) * 16));
        }
        // chunk c into its stage: the tile's token rows, and the thread's own weight units and scale rows
        // (each thread reads back only what it copied: [matrix, tile, row half][thread] 16 and 4 bytes)
        auto issue = [&](int64_t c) {
            const uint32_t stage = smem0 + uint32_t(c % kStages) * kStageBytes;
#pragma unroll
            for (int kc = 0; kc < 2; ++kc)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    wg::cp_async16(stage + kc * (kTokBytes / 2) + dst[i], src[i] + c * kWords * 4 + kc * 128,
                                   valid[i]);
#pragma unroll
            for (int m = 0; m < NM; ++m)
#pragma unroll
                for (int t = 0; t < MT; ++t)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int u = (m * MT + t) * 2 + h;
                        const int64_t off = int64_t(t * 64 + h * 8);
                        wg::cp_async16(stage + kTokBytes + (u * kThreads + tid) * 16,
                                       wp[m] + off * ld + c * 64, true);
                        wg::cp_async4(stage + kTokBytes + kWBytes + (u * kThreads + tid) * 4,
                                      sp[m] + off * ld_sc + c * 4);
                    }
        };
        __syncthreads();  // the previous tile's last reads of the stages are done
#pragma unroll
        for (int c = 0; c < kStages - 1; ++c) {
            if (c < chunks) issue(c);
            wg::cp_async_commit();
        }
        float acc[NM][MT][32];
#pragma unroll
        for (int m = 0; m < NM; ++m)
#pragma unroll
            for (int t = 0; t < MT; ++t)
#pragma unroll
                for (int v = 0; v < 32; ++v) acc[m][t][v] = 0.0f;
#pragma unroll 1
        for (int64_t c = 0; c < chunks; ++c) {
            wg::cp_async_wait<kStages - 2>();  // this thread's copies of chunk c have landed
            wg::fence_proxy_async();
            __syncthreads();  // everyone's have, and chunk c - 1's stage is free again
            if (c + kStages - 1 < chunks) issue(c + kStages - 1);
            wg::cp_async_commit();
            const uint32_t stage = smem0 + uint32_t(c % kStages) * kStageBytes;
            const uint8_t* ws = smem_al + (c % kStages) * kStageBytes + kTokBytes;
            uint32_t af[8][NM][MT][4];
#pragma unroll
            for (int m = 0; m < NM; ++m)
#pragma unroll
                for (int t = 0; t < MT; ++t) {
                    const int u = (m * MT + t) * 2;
                    const uint4 r0 = *reinterpret_cast<const uint4*>(ws + (u * kThreads + tid) * 16);
                    const uint4 r1 = *reinterpret_cast<const uint4*>(ws + ((u + 1) * kThreads + tid) * 16);
                    const uint32_t s0 =
                        *reinterpret_cast<const uint32_t*>(ws + kWBytes + (u * kThreads + tid) * 4);
                    const uint32_t s1 =
                        *reinterpret_cast<const uint32_t*>(ws + kWBytes + ((u + 1) * kThreads + tid) * 4);
                    const uint32_t m0 = fp4_multiplier((s0 >> (8 * q)) & 0xffu);
                    const uint32_t m1 = fp4_multiplier((s1 >> (8 * q)) & 0xffu);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {  // k-steps 2i and 2i + 1: word i of each 16-byte unit
                        fp4_a_frags(word_of(r0, i), word_of(r1, i), m0, m1, af[2 * i][m][t],
                                    af[2 * i + 1][m][t]);
                    }
                }
            wg::fence();
#pragma unroll
            for (int s = 0; s < 8; ++s) {
                // k-step s: K half s / 4, 32 bytes into its rows
                const uint64_t desc =
                    wg::desc_k_major_sw128(stage + (s >> 2) * (kTokBytes / 2) + (s & 3) * 32);
#pragma unroll
                for (int m = 0; m < NM; ++m)
#pragma unroll
                    for (int t = 0; t < MT; ++t) wg::mma_m64n64k16(acc[m][t], af[s][m][t], desc);
            }
            wg::commit();
            wg::wait<0>();
#pragma unroll
            for (int s = 0; s < 8; ++s)
#pragma unroll
                for (int m = 0; m < NM; ++m)
#pragma unroll
                    for (int t = 0; t < MT; ++t)
#pragma unroll
                        for (int v = 0; v < 4; ++v) wg::keep(af[s][m][t][v]);
#pragma unroll
            for (int m = 0; m < NM; ++m)
#pragma unroll
                for (int t = 0; t < MT; ++t)
#pragma unroll
                    for (int v = 0; v < 32; ++v) wg::keep(acc[m][t][v]);
        }
        wg::cp_async_wait<0>();
        // acc[m][t][4j + v]: row g + 8 (v >> 1) of the warp's 16, B row 8j + 2q + (v & 1): token i0 + 8j + 2q
        // + (v & 1), or (kLo) the hi (v even) and lo (v odd) halves of token i0 + 4j + q
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int c = 0; c < (kLo ? 1 : 2); ++c) {
                const int ti = i0 + (kLo ? 4 * j + q : 8 * j + 2 * q + c);
                if (ti >= cnt) continue;
                const int32_t pair = plan.pairs[b0 + ti];
                const float inv = io.inv[NM == 2 ? pair / p.k : pair];
#pragma unroll
                for (int t = 0; t < MT; ++t)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        float v[NM];
#pragma unroll
                        for (int m = 0; m < NM; ++m)
                            v[m] = (kLo ? acc[m][t][4 * j + 2 * h] + acc[m][t][4 * j + 2 * h + 1]
                                        : acc[m][t][4 * j + 2 * h + c]) *
                                   inv;
                        const float out = NM == 2 ? swiglu_clamped(v[0], v[NM - 1], p.limit) : v[0];
                        io.out[int64_t(pair) * io.n_out + row0 + t * 64 + h * 8 + g] = out;
                    }
            }
    }
}

template <int NM, int MT, bool kLo>
void launch_tiles(const MoeParams& p, const MoePlan& plan, const WgIo& io, unsigned slots, cudaStream_t s) {
    constexpr int smem = kStages * kStageBytes + 1024;  // + the alignment of the swizzled stages
    raise_dynamic_smem(moe_wgmma_kernel<NM, MT, kLo>, smem);
    moe_wgmma_kernel<NM, MT, kLo>
        <<<dim3(unsigned(io.n_out / (64 * MT)), slots), kThreads, smem, s>>>(p, plan, io);
}

template <int NM, int MT>
void launch_wgmma(const MoeParams& p, const MoePlan& plan, const WgIo& io, unsigned slots, cudaStream_t s) {
    if (p.act_fp8)
        launch_tiles<NM, MT, false>(p, plan, io, slots, s);
    else
        launch_tiles<NM, MT, true>(p, plan, io, slots, s);
}

void launch_wg_act_rows(const float* x, int64_t ldx, int64_t rows, int64_t K, uint32_t* data, float* inv,
                        bool lo, cudaStream_t s) {
    if (rows == 0) return;
    if (lo)
        wg_act_rows_kernel<true><<<unsigned(rows), 128, 0, s>>>(x, ldx, K / kChunk, data, inv);
    else
        wg_act_rows_kernel<false><<<unsigned(rows), 128, 0, s>>>(x, ldx, K / kChunk, data, inv);
}

}  // namespace

bool moe_wgmma_supported(const MoeParams& p, bool forced) {
    return p.scales_4b &&
           moe_gemm_supported(p, forced);  // gemm's cases, its scale rows copied 4 bytes at once
}

void launch_moe_wgmma(const MoeParams& p, Scratch& scratch, Stream s) {
    const cudaStream_t st = as_stream(s);
    const int64_t pairs = p.n * p.k;
    const unsigned slots = unsigned(std::min(pairs, p.n_experts));
    float* h = static_cast<float*>(scratch.get(1, size_t(pairs * p.I) * sizeof(float)));
    float* y = p.y_out ? p.y_out : static_cast<float*>(scratch.get(2, size_t(pairs * p.D) * sizeof(float)));
    const bool lo = !p.act_fp8;
    // f16 halves per element (hi, and lo in exact precision), one 1/s per row
    const int64_t per = lo ? 2 : 1, xw = p.n * p.D * per / 2, hw = pairs * p.I * per / 2;
    auto* words = static_cast<uint32_t*>(scratch.get(8, size_t(xw + hw + p.n + pairs) * sizeof(uint32_t)));
    float* x_inv = reinterpret_cast<float*>(words + xw + hw);
    float* h_inv = x_inv + p.n;
    const MoePlan plan = moe_plan_buffers(scratch, pairs, slots);
    launch_moe_plan(p, plan, st);
    launch_wg_act_rows(p.x, p.ld_x, p.n, p.D, words, x_inv, lo, st);
    launch_wgmma<2, 1>(p, plan, WgIo{words, x_inv, h, p.D, p.I}, slots, st);
    moe_quantise_h(p, h, pairs, st);
    launch_wg_act_rows(h, p.I, pairs, p.I, words + xw, h_inv, lo, st);
    launch_wgmma<1, 2>(p, plan, WgIo{words + xw, h_inv, y, p.I, p.D}, slots, st);
    if (p.y_out == nullptr) launch_moe_combine(p, y, s);
}

}  // namespace di::cuda
