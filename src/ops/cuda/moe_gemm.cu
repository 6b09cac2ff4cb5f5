// Routed experts of a prefill on the tensor cores (fp4 experts, many tokens per expert): for each selected
// expert, a tile of its weight rows times a tile of the tokens that chose it, register-tiled on mma.sync
// m16n8k16 with f32 accumulation.
//   plan:      the pairs grouped by expert (moe_plan.cuh)
//   x rows:    the chunk's tokens as hi/lo f16 chunks with one power-of-two scale per token (act_rows)
//   up:        h[pair, r] = swiglu(W1_e[r] . x_t, W3_e[r] . x_t)
//   h rows:    h as hi/lo chunks, one scale per pair
//   down:      y[pair, c] = W2_e[c] . h[pair]
//   combine:   out[t] = sum_j w[t, j] y[t, j] in slot order (launch_moe_combine, moe.cu)
// Block (row tile, active expert): 4 warps, 2 over rows x 2 over tokens; a warp holds 16 MT rows of each of
// its NM matrices and NT n-tiles of 8 B columns (a token's hi and lo side by side: 4 tokens per n-tile) for
// the whole K, then loops to the expert's next 32 tokens. The weights' bytes go to registers the way
// moe_mma.cu reads them (mma_frag.cuh: the fp4 group scale folded into the f16 weights, exact for the scales
// mma_ok admits); the token chunks come through the L1, shared by the block's warps. With one scale per row
// the tensor cores sum a row's chunks directly, and a product depends only on its own token: deterministic
// and batch-invariant (not bit-equal to moe_mma, which scales each chunk).
#include <algorithm>

#include "ops/cuda/gemv.cuh"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/moe_plan.cuh"

namespace di::cuda {
namespace {

using namespace mma;

constexpr int kWarps = 4;

struct GemmIo {
    ActChunks act;  // up: token rows; down: pair rows (one 1/s per row)
    float* out;     // up: h [pairs, I]; down: y [pairs, D]
    int64_t K, n_out;
};

template <int NM, int MT>
struct WeightRegs {
    uint4 w[NM][MT][2];  // rows g and g + 8 of each m-tile: the thread's 16 bytes of the chunk
    uint32_t sc[NM][MT][2];
};

// grid (n_out / (32 MT), max active experts), 128 threads. NM = 2: up (W1, W3, swiglu); NM = 1: down (W2).
// kLo: B columns 2t and 2t + 1 are token t's hi and lo halves (4 tokens an n-tile); else only the hi halves,
// 8 tokens an n-tile (quantised activations, whose lo halves are zero).
template <int NM, int MT, int NT, bool kLo>
__global__ void __launch_bounds__(32 * kWarps) moe_gemm_kernel(MoeParams p, MoePlan plan, GemmIo io) {
    allow_early_next();
    const int a = blockIdx.y;
    if (a >= *plan.n_active) return;
    const int e = plan.expert[a], b0 = plan.begin[a], cnt = plan.begin[a + 1] - b0;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    constexpr int kTokTile = kLo ? 4 : 8, kTokWarp = kTokTile * NT, kTokBlock = 2 * kTokWarp;
    const int64_t row0 = int64_t(blockIdx.x) * (32 * MT) + (warp & 1) * 16 * MT;
    const int64_t chunks = io.K / kChunk;
    const ExpertRows<NM> rows = expert_rows<NM>(p, e, row0 + g, q);
    const uint8_t* const* wp = rows.w;
    const uint8_t* sp[NM];  // the thread's group scale in each chunk
#pragma unroll
    for (int m = 0; m < NM; ++m) sp[m] = rows.sc[m] + q;
    const int64_t ld = rows.ld, ld_sc = rows.ld_sc;
    auto load_w = [&](int64_t c, WeightRegs<NM, MT>& r) {
#pragma unroll
        for (int m = 0; m < NM; ++m)
#pragma unroll
            for (int t = 0; t < MT; ++t)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int64_t off = int64_t(t * 16 + h * 8);
                    r.w[m][t][h] = __ldg(reinterpret_cast<const uint4*>(wp[m] + off * ld + c * 64));
                    r.sc[m][t][h] = __ldg(sp[m] + off * ld_sc + c * 4);
                }
    };
    for (int i0 = 0; i0 < cnt; i0 += kTokBlock) {
        // B column g of n-tile n: token i0 + tok(n) of the expert, its hi (g even) or lo words (kLo), or its
        // hi words
        const uint4* bp[NT];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            const int ti = i0 + (warp >> 1) * kTokWarp + n * kTokTile + (kLo ? g >> 1 : g);
            int64_t row = -1;
            if (ti < cnt) {
                const int32_t pair = plan.pairs[b0 + ti];
                row = NM == 2 ? pair / p.k : pair;
            }
            bp[n] = row < 0 ? nullptr
                            : reinterpret_cast<const uint4*>(io.act.data + row * chunks * kChunkWords +
                                                             (kLo ? (g & 1) * 64 : 0) + q * 16);
        }
        float acc[NM][MT][NT][4];
#pragma unroll
        for (int m = 0; m < NM; ++m)
#pragma unroll
            for (int t = 0; t < MT; ++t)
#pragma unroll
                for (int n = 0; n < NT; ++n)
#pragma unroll
                    for (int v = 0; v < 4; ++v) acc[m][t][n][v] = 0.0f;
        WeightRegs<NM, MT> cur, nxt;
        load_w(0, cur);
#pragma unroll 1
        for (int64_t c = 0; c < chunks; ++c) {
            if (c + 1 < chunks) load_w(c + 1, nxt);
            uint32_t mul[NM][MT][2];
#pragma unroll
            for (int m = 0; m < NM; ++m)
#pragma unroll
                for (int t = 0; t < MT; ++t)
#pragma unroll
                    for (int h = 0; h < 2; ++h) mul[m][t][h] = fp4_multiplier(cur.sc[m][t][h]);
#pragma unroll
            for (int i = 0; i < 4; ++i) {  // k-steps 2i and 2i + 1: word i of each 16-byte unit
                uint4 b[NT];
#pragma unroll
                for (int n = 0; n < NT; ++n)
                    b[n] =
                        bp[n] == nullptr ? make_uint4(0, 0, 0, 0) : __ldg(bp[n] + c * (kChunkWords / 4) + i);
#pragma unroll
                for (int m = 0; m < NM; ++m)
#pragma unroll
                    for (int t = 0; t < MT; ++t) {
                        const uint32_t w0 = word_of(cur.w[m][t][0], i), w1 = word_of(cur.w[m][t][1], i);
                        const uint32_t m0 = mul[m][t][0], m1 = mul[m][t][1];
                        uint32_t k0[4], k1[4];
                        fp4_a_frags(w0, w1, m0, m1, k0, k1);
#pragma unroll
                        for (int n = 0; n < NT; ++n) {
                            mma16816(acc[m][t][n], k0, b[n].x, b[n].y);
                            mma16816(acc[m][t][n], k1, b[n].z, b[n].w);
                        }
                    }
            }
            if (c + 1 < chunks) cur = nxt;
        }
        // acc[..][n] = rows (g, g + 8) x columns 2q, 2q + 1: token n * 4 + q's hi and lo (kLo), or tokens
        // n * 8 + 2q and + 1
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int c = 0; c < (kLo ? 1 : 2); ++c) {
                const int ti = i0 + (warp >> 1) * kTokWarp + n * kTokTile + (kLo ? q : 2 * q + c);
                if (ti >= cnt) continue;
                const int32_t pair = plan.pairs[b0 + ti];
                const float inv = io.act.inv[NM == 2 ? pair / p.k : pair];
#pragma unroll
                for (int t = 0; t < MT; ++t)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        float v[NM];
#pragma unroll
                        for (int m = 0; m < NM; ++m)
                            v[m] = (kLo ? acc[m][t][n][2 * h] + acc[m][t][n][2 * h + 1]
                                        : acc[m][t][n][2 * h + c]) *
                                   inv;
                        const float out = NM == 2 ? swiglu_clamped(v[0], v[NM - 1], p.limit) : v[0];
                        io.out[int64_t(pair) * io.n_out + row0 + t * 16 + h * 8 + g] = out;
                    }
            }
    }
}

template <int NM, int MT, int NT>
void launch_gemm(const MoeParams& p, const MoePlan& plan, const GemmIo& io, unsigned slots, cudaStream_t s) {
    const dim3 grid(unsigned(io.n_out / (32 * MT)), slots);
    if (p.act_fp8)
        moe_gemm_kernel<NM, MT, NT, false><<<grid, 32 * kWarps, 0, s>>>(p, plan, io);
    else
        moe_gemm_kernel<NM, MT, NT, true><<<grid, 32 * kWarps, 0, s>>>(p, plan, io);
}

}  // namespace

bool moe_gemm_supported(const MoeParams& p, bool forced) {
    return p.mma_ok && p.gemv_format == gemv::kFp4 && p.D % kChunk == 0 && p.I % kChunk == 0 &&
           p.n * p.k <= kMoeGemmMaxPairs &&
           (forced || (p.n * p.k >= kMoeGemmMinPairs && p.n * p.k >= 8 * p.n_experts));
}

void launch_moe_gemm(const MoeParams& p, Scratch& scratch, Stream s) {
    const cudaStream_t st = as_stream(s);
    const int64_t pairs = p.n * p.k;
    const unsigned slots = unsigned(std::min(pairs, p.n_experts));
    float* h = static_cast<float*>(scratch.get(1, size_t(pairs * p.I) * sizeof(float)));
    float* y = p.y_out ? p.y_out : static_cast<float*>(scratch.get(2, size_t(pairs * p.D) * sizeof(float)));
    // one word (hi and lo f16) per element, one 1/s per row
    const int64_t xw = p.n * p.D, hw = pairs * p.I;
    auto* words = static_cast<uint32_t*>(scratch.get(8, size_t(xw + hw + p.n + pairs) * sizeof(uint32_t)));
    const ActChunks xa{words, reinterpret_cast<float*>(words + xw + hw)};
    const ActChunks ha{words + xw, reinterpret_cast<float*>(words + xw + hw + p.n)};
    const MoePlan plan = moe_plan_buffers(scratch, pairs, slots);
    launch_moe_plan(p, plan, st);
    launch_act_rows(p.x, p.ld_x, p.n, p.D, xa, st);
    // 32 rows x 16 tokens a warp (hi/lo); 16 x 32 measured slower on the H200 (n = 2730: 11.1 ms against 9.8)
    launch_gemm<2, 2, 4>(p, plan, GemmIo{xa, h, p.D, p.I}, slots, st);
    moe_quantise_h(p, h, pairs, st);
    launch_act_rows(h, p.I, pairs, p.I, ha, st);
    launch_gemm<1, 4, 4>(p, plan, GemmIo{ha, y, p.I, p.D}, slots, st);
    if (p.y_out == nullptr) launch_moe_combine(p, y, s);
}

}  // namespace di::cuda
