// Routed experts on the tensor cores for decode and small batches (fp4 experts, f32 activations as hi/lo
// f16 chunks, mma_frag.cuh):
//   x chunks:  the step's token rows as hi/lo f16 chunks (one launch)
//   up:        h[pair, r] = swiglu(W1_e[r] . x_t, W3_e[r] . x_t); a warp owns 16 rows of W1 and the same 16
//   of
//              W3 over a quarter of K, so both products of a row meet in one thread
//   h chunks:  h as hi/lo chunks (one launch)
//   down:      y[pair, c] = W2_e[c] . h[pair], a warp 32 rows of W2 over a quarter of K
//   combine:   out[t] = sum_j w[t, j] y[t, j] in slot order (launch_moe_combine, moe.cu)
// One token (decode at batch 1) takes two launches instead of five: each warp turns its own quarter of x (up)
// or h (down) into chunks in shared memory, and the last down block of a row tile to finish adds the slots'
// rows (the combine's order and double sums, so the same bits as the combine kernel).
// Block (row tile, slot): one token: slot j is pair j, no plan; more tokens: the plan's
// active expert a, its tokens 4 at a time (B columns 2t and 2t + 1 are token t's hi and lo). Each selected
// expert's weights are read once per 4 of its tokens. In the native precision (MoeParams::act_fp8) the
// activations are e4m3 values under power-of-two scales, exact in f16 at the chunks' shift, so every lo half
// is 0: with set_moe_mma_tok8 a pass takes 8 tokens (B column t is token t's hi) and reads the weights once
// per 8; a token's sums are the same (its lo column only ever added +0). The fp4 group scale is folded into
// the f16 weights (exact for UE8M0 bytes in [kFp4F16ScaleMin, kFp4F16ScaleMax], which dispatch checks). A
// token's sums (chunk order, the warps' partials in warp order, hi before lo) do not depend on the other
// tokens: deterministic and batch-invariant.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "ops/cuda/env_switch.h"
#include "ops/cuda/gemv.cuh"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/moe_plan.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {
namespace {

using namespace mma;

// One chunk's loads for one warp: NM matrices x MT row tiles x rows (g, g + 8), the B fragment of the
// thread's column and the chunk's 1/s of token q (whose columns 2q, 2q + 1 the thread accumulates).
template <int NM, int MT>
struct Frag {
    uint4 w[NM][MT][2];
    uint32_t sc[NM][MT][2];
    uint4 b[4];
    float inv, inv2;
};

// One thread's view of a block's pass (pointers per thread: an array indexed by lane would live in local
// memory).
template <int NM>
struct Job {
    const uint8_t* w[NM];   // row 0 of this block's tile in each matrix
    const uint8_t* sc[NM];  // its scale row
    int64_t ld, ld_sc;      // bytes (one for W1 and W3: MoeParams::mma_ok)
    const uint32_t* act;    // chunk 0 of this thread's B column (its token's hi or lo words), or null
    const float* inv;       // 1/s of token q's chunks, or null
    const float* inv2;      // 8 tokens a pass: inv is token 2q's, inv2 token 2q + 1's (or null)
};

// f(m, t, r, i) for each of a thread's weight units of a chunk: matrix m, row tile t, row g (r = 0) or g + 8
// (r = 1) of the tile; i numbers them 0 .. 2 NM MT - 1.
template <int NM, int MT, typename F>
__device__ __forceinline__ void each_unit(F&& f) {
#pragma unroll
    for (int m = 0; m < NM; ++m)
#pragma unroll
        for (int t = 0; t < MT; ++t)
#pragma unroll
            for (int r = 0; r < 2; ++r) f(m, t, r, (m * MT + t) * 2 + r);
}

template <int NM, int MT>
__device__ __forceinline__ void load_w(const Job<NM>& j, int c, int g, int q, Frag<NM, MT>& f) {
    each_unit<NM, MT>([&](int m, int t, int r, int) {
        const int64_t row = t * 16 + r * 8 + g;
        f.w[m][t][r] = __ldcs(reinterpret_cast<const uint4*>(j.w[m] + row * j.ld + c * 64 + q * 16));
        f.sc[m][t][r] = __ldg(j.sc[m] + row * j.ld_sc + c * 4 + q);
    });
}

// kShared: the chunks sit in shared memory (one token: the warp made them), else in global memory.
template <int NM, int MT, bool kShared, bool kT8 = false>
__device__ __forceinline__ void load_b(const Job<NM>& j, int c, Frag<NM, MT>& f) {
    if (j.act != nullptr) {
        const uint4* b = reinterpret_cast<const uint4*>(j.act + int64_t(c) * kChunkWords);
#pragma unroll
        for (int i = 0; i < 4; ++i) f.b[i] = kShared ? b[i] : __ldg(b + i);
    } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) f.b[i] = make_uint4(0, 0, 0, 0);
    }
    f.inv = j.inv == nullptr ? 0.0f : kShared ? j.inv[c] : __ldg(j.inv + c);
    if constexpr (kT8) {
        f.inv2 = j.inv2 == nullptr ? 0.0f : __ldg(j.inv2 + c);
    }
}

template <int NM, int MT, bool kShared, bool kT8 = false>
__device__ __forceinline__ void load_frag(const Job<NM>& j, int c, int g, int q, Frag<NM, MT>& f) {
    load_w(j, c, g, q, f);
    load_b<NM, MT, kShared, kT8>(j, c, f);
}

// kT8: accumulator columns 2q and 2q + 1 are two tokens, each with its own 1/s.
template <int NM, int MT, bool kT8 = false>
__device__ __forceinline__ void compute_frag(const Frag<NM, MT>& f, float (&acc)[NM][MT][4]) {
    const uint32_t bw[16] = {f.b[0].x, f.b[0].y, f.b[0].z, f.b[0].w, f.b[1].x, f.b[1].y, f.b[1].z, f.b[1].w,
                             f.b[2].x, f.b[2].y, f.b[2].z, f.b[2].w, f.b[3].x, f.b[3].y, f.b[3].z, f.b[3].w};
#pragma unroll
    for (int m = 0; m < NM; ++m)
#pragma unroll
        for (int t = 0; t < MT; ++t) {
            const uint32_t m0 = fp4_multiplier(f.sc[m][t][0]), m1 = fp4_multiplier(f.sc[m][t][1]);
            const uint32_t w0[4] = {f.w[m][t][0].x, f.w[m][t][0].y, f.w[m][t][0].z, f.w[m][t][0].w};
            const uint32_t w1[4] = {f.w[m][t][1].x, f.w[m][t][1].y, f.w[m][t][1].z, f.w[m][t][1].w};
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                {  // k-step 2i: nibble pairs (0, 4) and (1, 5)
                    const uint32_t a[4] = {
                        hmul2_bits(fp4_pair<0>(w0[i]), m0), hmul2_bits(fp4_pair<0>(w1[i]), m1),
                        hmul2_bits(fp4_pair<1>(w0[i]), m0), hmul2_bits(fp4_pair<1>(w1[i]), m1)};
                    mma16816(d, a, bw[4 * i], bw[4 * i + 1]);
                }
                {  // k-step 2i + 1: pairs (2, 6) and (3, 7)
                    const uint32_t a[4] = {
                        hmul2_bits(fp4_pair<2>(w0[i]), m0), hmul2_bits(fp4_pair<2>(w1[i]), m1),
                        hmul2_bits(fp4_pair<3>(w0[i]), m0), hmul2_bits(fp4_pair<3>(w1[i]), m1)};
                    mma16816(d, a, bw[4 * i + 2], bw[4 * i + 3]);
                }
            }
#pragma unroll
            for (int e = 0; e < 4; ++e)
                acc[m][t][e] = fmaf(kT8 && (e & 1) ? f.inv2 : f.inv, d[e], acc[m][t][e]);
        }
}

template <int NM, int MT>
__device__ __forceinline__ void zero_acc(float (&acc)[NM][MT][4]) {
#pragma unroll
    for (int m = 0; m < NM; ++m)
#pragma unroll
        for (int t = 0; t < MT; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][t][e] = 0.0f;
}

// Partial sums of one warp over chunks [c0, c1), two chunks' loads in flight. `first` runs once the first
// chunk's weight loads are issued, before any activation is read (one token: the warp makes its chunks).
template <int NM, int MT, bool kShared, bool kT8 = false, typename First>
__device__ __forceinline__ void warp_chunks(const Job<NM>& j, int c0, int c1, float (&acc)[NM][MT][4],
                                            First&& first) {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    zero_acc(acc);
    Frag<NM, MT> f0, f1;
    load_w(j, c0, g, q, f0);
    first();
    load_b<NM, MT, kShared, kT8>(j, c0, f0);
#pragma unroll 1
    for (int c = c0; c < c1; c += 2) {
        if (c + 1 < c1) load_frag<NM, MT, kShared, kT8>(j, c + 1, g, q, f1);
        compute_frag<NM, MT, kT8>(f0, acc);
        if (c + 1 < c1) {
            if (c + 2 < c1) load_frag<NM, MT, kShared, kT8>(j, c + 2, g, q, f0);
            compute_frag<NM, MT, kT8>(f1, acc);
        }
    }
}

// Staged weights (set_moe_mma_stages): each lane copies its own 16-byte weight units of a chunk
// and the word of the chunk's four group scales beside each (it takes byte q) into a shared-memory slot
// (cp.async), S chunks ahead: a warp keeps S chunks in flight without holding them in registers, where the
// register form keeps two (at 157 registers, three blocks an SM). A lane reads back only what it copied, so
// no barrier stands between a copy and its use; the sums are those of the register form.
template <int NM, int MT>
constexpr int kSlotUnits = 64 * (NM * MT);  // uint4 weight units (and u32 scale words) of a warp's slot

template <int NM, int MT>
__device__ __forceinline__ void stage_chunk(const Job<NM>& j, int c, int g, int q, int lane, uint4* w,
                                            uint32_t* sc) {
    each_unit<NM, MT>([&](int m, int t, int r, int i) {
        const int64_t row = t * 16 + r * 8 + g;
        const int u = i * 32 + lane;
        wg::cp_async16(wg::smem_addr(w + u), j.w[m] + row * j.ld + c * 64 + q * 16, true);
        wg::cp_async4(wg::smem_addr(sc + u), j.sc[m] + row * j.ld_sc + c * 4);  // scales_4b
    });
}

template <int NM, int MT>
__device__ __forceinline__ void read_stage(const uint4* w, const uint32_t* sc, int q, int lane,
                                           Frag<NM, MT>& f) {
    each_unit<NM, MT>([&](int m, int t, int r, int i) {
        f.w[m][t][r] = w[i * 32 + lane];
        f.sc[m][t][r] = (sc[i * 32 + lane] >> (8 * q)) & 0xffu;
    });
}

// warp_chunks with the weights through S slots of the warp's staging area (w: S * kSlotUnits uint4, sc:
// as many words; fewer slots suffice where the warp has fewer chunks). A pass over the plan's tokens stages
// the weights again (the block's previous pass read them: from the L2).
template <int NM, int MT, int S, bool kShared, typename First>
__device__ __forceinline__ void warp_chunks_staged(const Job<NM>& j, int c0, int c1, float (&acc)[NM][MT][4],
                                                   uint4* w, uint32_t* sc, First&& first) {
    constexpr int U = kSlotUnits<NM, MT>;
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    zero_acc(acc);
#pragma unroll
    for (int s = 0; s < S; ++s) {  // one group per slot, empty past c1: every wait counts the same
        if (c0 + s < c1) stage_chunk<NM, MT>(j, c0 + s, g, q, lane, w + s * U, sc + s * U);
        wg::cp_async_commit();
    }
    first();
#pragma unroll 1
    for (int c = c0; c < c1; ++c) {
        const int s = (c - c0) % S;
        wg::cp_async_wait<S - 1>();  // chunk c's group (S + (c - c0) committed)
        Frag<NM, MT> f;
        read_stage<NM, MT>(w + s * U, sc + s * U, q, lane, f);
        load_b<NM, MT, kShared>(j, c, f);
        compute_frag(f, acc);  // f's registers are read before the slot is copied over
        if (c + S < c1) stage_chunk<NM, MT>(j, c + S, g, q, lane, w + s * U, sc + s * U);
        wg::cp_async_commit();
    }
}

struct Io {
    ActChunks act;      // up: token rows; down: pair rows (more than one token)
    const float* rows;  // one token: up x, down h [k, I] (f32; the warps make their chunks)
    float* out;         // up: h [pairs, I]; down: y [pairs, D]
    int64_t K, n_out;   // K of the matrices, rows of the output per pair
    int32_t* done;      // one token: finished slots per down row tile (the up launch zeroes them); null: no
                        // combine (an expert-parallel pass)
    bool quantise = false;  // one token: rows quantised as the native precision's activations in the chunks
};

// One token, down: once every slot's block of this row tile has written its y rows, the last one adds them
// for the tile (combine_column: the combine kernel's sums, so the same bits).
template <int R>
__device__ __forceinline__ void combine_tile(const MoeParams& p, const Io& io, int64_t row0) {
    __shared__ int last;
    __threadfence();  // this block's y rows are visible before it counts itself
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(io.done + blockIdx.x, 1) == int(gridDim.y) - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int i = threadIdx.x; i < R; i += blockDim.x)
        p.out[row0 + i] = combine_column<true>(p, io.out, 0, row0 + i);
}

// Bytes of shared memory before a block's staging area: the partials, then (one token) the chunks and their
// 1/s, rounded up to 16.
__host__ __device__ constexpr int64_t staging_offset(bool direct, int W, int NM, int MT, int64_t chunks) {
    return (int64_t(W * NM * 16 * MT * 8) * 4 + (direct ? chunks * (kChunkWords + 1) * 4 : 0) + 15) / 16 * 16;
}

// The warp's staging area of S slots (fewer where it has fewer chunks): weight units, then scale words.
template <int NM, int MT, int S>
__device__ __forceinline__ void staging_area(float* red, bool direct, int W, int warp, int64_t chunks,
                                             int64_t cpw, uint4*& w, uint32_t*& sc) {
    constexpr int U = kSlotUnits<NM, MT>;
    const int slots = min(S, int(cpw));
    auto* base = reinterpret_cast<unsigned char*>(red) + staging_offset(direct, W, NM, MT, chunks);
    w = reinterpret_cast<uint4*>(base) + int64_t(warp) * slots * U;
    sc = reinterpret_cast<uint32_t*>(reinterpret_cast<uint4*>(base) + int64_t(W) * slots * U) +
         int64_t(warp) * slots * U;
}

// grid (rows / (16 MT), slots), 32 * W threads. NM = 2: up (W1, W3, swiglu); NM = 1: down (W2). S > 0: the
// weights through S staged chunks a warp (warp_chunks_staged). kT8: 8 tokens a pass, hi halves only (the
// native precision's chunks, whose lo halves are 0; set_moe_mma_tok8).
template <int NM, int MT, bool kDirect, int S = 0, bool kT8 = false>
__global__ void __launch_bounds__(128) moe_mma_kernel(MoeParams p, MoePlan plan, Io io) {
    static_assert(!kT8 || (!kDirect && S == 0), "8 tokens a pass: the plan's passes, weights in registers");
    constexpr int kTP = kT8 ? 8 : 4;  // tokens a pass
    allow_early_next();
    // [W][NM][16 MT][8] partials; one token: then the K / 128 chunks and their 1/s (and the staging area)
    extern __shared__ float red[];
    constexpr int R = 16 * MT;
    const int a = blockIdx.y;
    const int W = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row0 = int64_t(blockIdx.x) * R, chunks = io.K / kChunk, cpw = chunks / W;
    int e, b0, cnt;
    if constexpr (kDirect) {
        if (NM == 2 && a == 0 && blockIdx.x == 0 && io.done != nullptr)
            for (int i = threadIdx.x; i < p.D / (16 * 2); i += blockDim.x) io.done[i] = 0;  // down's tiles
        e = moe_expert_of(p, a), b0 = a, cnt = e < 0 ? 0 : 1;
        if (NM == 2 && e < 0) return;  // neither launch reads or writes this slot's rows
    } else {
        if (a >= *plan.n_active) return;
        e = plan.expert[a], b0 = plan.begin[a], cnt = plan.begin[a + 1] - b0;
    }
    const int g = lane >> 2, q = lane & 3;
    uint32_t* own = reinterpret_cast<uint32_t*>(red + W * NM * R * 8);  // one token's chunks
    float* own_inv = reinterpret_cast<float*>(own + chunks * kChunkWords);
    Job<NM> j;
#pragma unroll
    for (int m = 0; m < NM; ++m) {
        const WeightRef& w = p.table[3 * max(e, 0) + (NM == 2 ? m : 2)];
        j.w[m] = static_cast<const uint8_t*>(w.data) + row0 * w.ld;
        j.sc[m] = static_cast<const uint8_t*>(w.scale) + row0 * w.ld_scale;
        j.ld = w.ld, j.ld_sc = w.ld_scale;
    }
    auto pair_at = [&](int i) { return kDirect ? int32_t(a) : plan.pairs[b0 + i]; };
    for (int i0 = 0; i0 < cnt; i0 += kTP) {
        const int nt = min(kTP, cnt - i0);
        // activation row of the pass's token t (B columns 2t: hi, 2t + 1: lo; kT8: column t), or -1
        auto act_row = [&](int t) -> int64_t {
            return t < nt ? (NM == 2 ? pair_at(i0 + t) / p.k : pair_at(i0 + t)) : -1;
        };
        const int64_t brow = act_row(kT8 ? g : g >> 1), crow = act_row(kT8 ? 2 * q : q);
        const int c0 = int(warp * cpw), c1 = int((warp + 1) * cpw);
        float acc[NM][MT][4];
        if constexpr (kDirect) {
            j.act = brow < 0 ? nullptr : own + (g & 1) * 64 + q * 16;
            j.inv = crow < 0 ? nullptr : own_inv;
            const float* src = NM == 2 ? io.rows : io.rows + int64_t(a) * io.K;
            auto make_chunks = [&] {
                for (int c = c0; c < c1; ++c) {
                    if (io.quantise)
                        warp_chunk_quantised<false>(src + int64_t(c) * kChunk, own + int64_t(c) * kChunkWords,
                                                    own_inv + c, lane);
                    else
                        warp_chunk<false>(src + int64_t(c) * kChunk, own + int64_t(c) * kChunkWords,
                                          own_inv + c, lane);
                }
                __syncwarp();
            };
            if constexpr (S > 0) {
                uint4* w;
                uint32_t* sc;
                staging_area<NM, MT, S>(red, true, W, warp, chunks, cpw, w, sc);
                warp_chunks_staged<NM, MT, S, true>(j, c0, c1, acc, w, sc, make_chunks);
            } else {
                warp_chunks<NM, MT, true>(j, c0, c1, acc, make_chunks);
            }
        } else {
            j.act = brow < 0 ? nullptr
                             : io.act.data + brow * chunks * kChunkWords + (kT8 ? 0 : (g & 1) * 64) + q * 16;
            j.inv = crow < 0 ? nullptr : io.act.inv + crow * chunks;
            if constexpr (kT8) {
                const int64_t crow2 = act_row(2 * q + 1);
                j.inv2 = crow2 < 0 ? nullptr : io.act.inv + crow2 * chunks;
            }
            if constexpr (S > 0) {
                uint4* w;
                uint32_t* sc;
                staging_area<NM, MT, S>(red, false, W, warp, chunks, cpw, w, sc);
                warp_chunks_staged<NM, MT, S, false>(j, c0, c1, acc, w, sc, [] {});
            } else {
                warp_chunks<NM, MT, false, kT8>(j, c0, c1, acc, [] {});
            }
        }
        if (i0 > 0) __syncthreads();  // the previous pass has read red
#pragma unroll
        for (int m = 0; m < NM; ++m)
#pragma unroll
            for (int t = 0; t < MT; ++t)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    float* dst = red + ((warp * NM + m) * R + t * 16 + r * 8 + g) * 8 + 2 * q;
                    dst[0] = acc[m][t][2 * r], dst[1] = acc[m][t][2 * r + 1];
                }
        __syncthreads();
        for (int i = threadIdx.x; i < R * nt; i += blockDim.x) {
            const int lr = i / nt, t = i % nt;
            float v[NM];
#pragma unroll
            for (int m = 0; m < NM; ++m) {
                float s = 0.0f;
                for (int w = 0; w < W; ++w) {  // kT8: the 4-token form's hi + lo with lo = +0, the same sum
                    const float* src = red + ((w * NM + m) * R + lr) * 8 + (kT8 ? t : 2 * t);
                    s += kT8 ? src[0] : src[0] + src[1];
                }
                v[m] = s;
            }
            const float out = NM == 2 ? swiglu_clamped(v[0], v[NM - 1], p.limit) : v[0];
            io.out[int64_t(pair_at(i0 + t)) * io.n_out + row0 + lr] = out;
        }
    }
    if constexpr (kDirect && NM == 1)
        if (io.done != nullptr) combine_tile<R>(p, io, row0);
}

int warps_for(int64_t K) {
    const int64_t chunks = K / kChunk;
    return chunks % 4 == 0 ? 4 : chunks % 2 == 0 ? 2 : 1;
}

int mma_stages = int(env_int("DEEPINFER_MOE_MMA_STAGES", 0));

// Both on unless the environment says otherwise (H100, 4 layers, batch 256: 17.1 ms a step against 22.2;
// batch 128: 9.9 against 11.5; docs/benchmarks.md). DEEPINFER_MOE_MMA_TOK4 takes 4 tokens a pass again,
// DEEPINFER_MOE_MMA_PAIRS sets the pass's limit (at least kMoeGroupedMaxPairs, the earlier chunks).
bool tok8_enabled = std::getenv("DEEPINFER_MOE_MMA_TOK4") == nullptr;
constexpr int64_t kMmaPairsDefault = 2047;  // a batch of up to 341 tokens at k = 6 in one pass
int64_t mma_max_pairs = std::max(env_int("DEEPINFER_MOE_MMA_PAIRS", kMmaPairsDefault), kMoeGroupedMaxPairs);

// Shared memory of a block with S staged chunks a warp, or 0 where it exceeds the SM's.
template <int NM, int MT, int S>
size_t staged_smem(bool direct, int64_t K) {
    const int W = warps_for(K);
    const int64_t chunks = K / kChunk, slots = std::min<int64_t>(S, chunks / W);
    const int64_t bytes = staging_offset(direct, W, NM, MT, chunks) +
                          W * slots * kSlotUnits<NM, MT> * int64_t(sizeof(uint4) + 4);
    return bytes <= 227 * 1024 ? size_t(bytes) : 0;
}

template <int NM, int MT, bool kDirect, int S>
bool launch_staged(const MoeParams& p, const MoePlan& plan, const Io& io, dim3 grid, cudaStream_t s) {
    const size_t smem = staged_smem<NM, MT, S>(kDirect, io.K);
    if (smem == 0 || !p.scales_4b) return false;
    // Above 48 KB a kernel must ask for its shared memory: at most the block's opt-in limit less the kernel's
    // static shared memory (asking for the whole 227 KB is refused when the kernel has any).
    static const size_t dynamic_limit = [] {
        cudaFuncAttributes fa{};
        DI_CUDA_CHECK(cudaFuncGetAttributes(&fa, moe_mma_kernel<NM, MT, kDirect, S>));
        return smem_optin() - fa.sharedSizeBytes;
    }();
    if (smem > dynamic_limit) return false;
    raise_dynamic_smem(moe_mma_kernel<NM, MT, kDirect, S>, smem);
    moe_mma_kernel<NM, MT, kDirect, S><<<grid, 32 * warps_for(io.K), smem, s>>>(p, plan, io);
    return true;
}

template <int NM, int MT>
void launch_half(const MoeParams& p, const MoePlan& plan, const Io& io, unsigned slots, bool direct,
                 cudaStream_t s, bool tok8 = false) {
    const int W = warps_for(io.K);
    const dim3 grid(unsigned(io.n_out / (16 * MT)), slots);
    size_t smem = size_t(W * NM * 16 * MT * 8) * sizeof(float);
    if (direct) {
        if (mma_stages == 4 && launch_staged<NM, MT, true, 4>(p, plan, io, grid, s)) return;
        if (mma_stages == 8 && launch_staged<NM, MT, true, 8>(p, plan, io, grid, s)) return;
        smem += size_t(io.K / kChunk) * (kChunkWords + 1) * sizeof(uint32_t);
        moe_mma_kernel<NM, MT, true><<<grid, 32 * W, smem, s>>>(p, plan, io);
    } else {
        if (tok8) {
            moe_mma_kernel<NM, MT, false, 0, true><<<grid, 32 * W, smem, s>>>(p, plan, io);
            return;
        }
        if (mma_stages == 4 && launch_staged<NM, MT, false, 4>(p, plan, io, grid, s)) return;
        if (mma_stages == 8 && launch_staged<NM, MT, false, 8>(p, plan, io, grid, s)) return;
        moe_mma_kernel<NM, MT, false><<<grid, 32 * W, smem, s>>>(p, plan, io);
    }
}

// flag |= 1 when a scale byte of matrix blockIdx.x lies outside the f16 fold range.
__global__ void __launch_bounds__(256) scale_range_kernel(const WeightRef* table, int* flag) {
    allow_early_next();
    const WeightRef w = table[blockIdx.x];
    const auto* sc = static_cast<const uint8_t*>(w.scale);
    const int64_t groups = w.in_dim / 32;
    bool bad = false;
    for (int64_t i = threadIdx.x; i < w.out_dim * groups; i += blockDim.x) {
        const int b = sc[(i / groups) * w.ld_scale + i % groups];
        bad |= b < kFp4F16ScaleMin || b > kFp4F16ScaleMax;
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flag, 1);
}

}  // namespace

bool fp4_scales_fold_to_f16(const WeightRef* table_device, const WeightRef* table_host, int64_t count,
                            Stream s) {
    for (int64_t i = 0; i < count; ++i)
        if (table_host[i].format != 2 || !table_host[i].scale_e8m0 || table_host[i].in_dim % 32 != 0)
            return false;
    if (count == 0) return false;
    return device_flag(s, [&](int* flag, cudaStream_t st) {
               scale_range_kernel<<<unsigned(count), 256, 0, st>>>(table_device, flag);
           }) == 0;
}

void set_moe_mma_stages(int stages) { mma_stages = stages; }
void set_moe_mma_tok8(bool on) { tok8_enabled = on; }
bool moe_mma_tok8() { return tok8_enabled; }
void set_moe_mma_max_pairs(int64_t pairs) { mma_max_pairs = std::max(pairs, kMoeGroupedMaxPairs); }
int64_t moe_mma_max_pairs() { return mma_max_pairs; }

bool moe_mma_supported(const MoeParams& p) {
    return p.mma_ok && p.gemv_format == gemv::kFp4 && p.D % kChunk == 0 && p.I % kChunk == 0 &&
           p.n * p.k <= mma_max_pairs;
}

void launch_moe_mma(const MoeParams& p, Scratch& scratch, Stream s) {
    const cudaStream_t st = as_stream(s);
    const int64_t pairs = p.n * p.k;
    const bool direct = p.n == 1;
    const unsigned slots = direct ? unsigned(p.k) : unsigned(std::min(pairs, p.n_experts));
    float* h = static_cast<float*>(scratch.get(1, size_t(pairs * p.I) * sizeof(float)));
    float* y = p.y_out ? p.y_out : static_cast<float*>(scratch.get(2, size_t(pairs * p.D) * sizeof(float)));
    if (direct) {  // x and h chunked (and quantised) inside the launches, the combine inside the down launch
        auto* done =
            p.y_out ? nullptr : static_cast<int32_t*>(scratch.get(8, size_t(p.D / 32) * sizeof(int32_t)));
        const MoePlan none{};
        const bool h_here = p.act_fp8 && act_quant_in_kernels();
        launch_half<2, 1>(p, none, Io{{}, p.x, h, p.D, p.I, done, p.act_fp8 && p.x_raw}, slots, true, st);
        if (!h_here) moe_quantise_h(p, h, pairs, st);
        launch_half<1, 2>(p, none, Io{{}, h, y, p.I, p.D, done, h_here}, slots, true, st);
        return;
    }
    if (p.x_raw) {  // the batch path reads the quantiser's copy
        std::fprintf(stderr, "deepinfer: moe mma given unquantised x for more than one token\n");
        std::abort();
    }
    // one word (hi and lo f16) per element, one 1/s per chunk
    const int64_t xw = p.n * p.D, hw = pairs * p.I, xc = p.n * p.D / kChunk, hc = pairs * p.I / kChunk;
    auto* words = static_cast<uint32_t*>(scratch.get(8, size_t(xw + hw + xc + hc) * sizeof(uint32_t)));
    const ActChunks xa{words, reinterpret_cast<float*>(words + xw + hw)};
    const ActChunks ha{words + xw, reinterpret_cast<float*>(words + xw + hw + xc)};
    const MoePlan plan = moe_plan_buffers(scratch, pairs, slots);
    launch_moe_plan(p, plan, st);
    launch_act_chunks(p.x, p.ld_x, p.n, p.D, xa, false, st);
    const bool tok8 = p.act_fp8 && tok8_enabled;  // the quantiser's copies: every lo half 0
    launch_half<2, 1>(p, plan, Io{xa, nullptr, h, p.D, p.I, nullptr}, slots, false, st, tok8);
    moe_quantise_h(p, h, pairs, st);
    launch_act_chunks(h, p.I, pairs, p.I, ha, false, st);
    launch_half<1, 2>(p, plan, Io{ha, nullptr, y, p.I, p.D, nullptr}, slots, false, st, tok8);
    if (p.y_out == nullptr) launch_moe_combine(p, y, s);
}

}  // namespace di::cuda
