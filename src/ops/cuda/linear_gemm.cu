// y[n, out] = x[n, in] . W^T for fp8 block-scaled weights and many rows (a prefill's linears in the exact
// precision), register-tiled on mma.sync m16n8k16: block = 64 weight rows x 32 tokens, 4 warps (2 over rows x
// 2 over tokens), each warp 2 m-tiles x 4 n-tiles (a token's hi and lo f16 halves side by side) over the
// whole K. x enters as hi/lo f16 chunks in the fp8 order of mma_frag.cuh with one power-of-two scale per row
// (act_rows), so a chunk's product needs no activation scale; the weight's 128 x 128 block scale multiplies
// each chunk's partial product (a 16-row m-tile lies in one block). The weight's e4m3 bytes convert to f16
// exactly, one cvt per pair, as linear_mma.cu reads them; the tokens' chunks come through the L1, shared by
// the block's warps. A token's sums do not depend on the other tokens: deterministic and batch-invariant
// (not bit-equal to linear_mma, which scales each chunk of x).
#include "ops/cuda/mma_frag.cuh"

namespace di::cuda {
namespace {

using namespace mma;

constexpr int kWarps = 4, kMT = 2, kNT = 4, kRowsBlock = 2 * 16 * kMT, kTokWarp = 4 * kNT,
              kTokBlock = 2 * kTokWarp;

struct Params {
    const uint8_t* w;
    int64_t ld;  // bytes
    const void* scale;
    int64_t ld_scale;  // [out / 128, in / 128]
    bool scale_e8m0;
    ActChunks act;  // fp8 order, one 1/s per row
    float* y;
    int64_t ldy, n, K;
};

struct WeightRegs {
    uint4 w[kMT][2][2];  // [m-tile][row g, g + 8][16-byte half]: the thread's 32 bytes of the chunk
    float ws[kMT];       // the m-tile's block scale at this chunk
};

// grid (out / 64, ceil(n / 32)), 128 threads.
__global__ void __launch_bounds__(32 * kWarps) linear_gemm_kernel(Params p) {
    allow_early_next();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int64_t row0 = int64_t(blockIdx.x) * kRowsBlock + (warp & 1) * 16 * kMT;
    const int64_t t0 = int64_t(blockIdx.y) * kTokBlock + (warp >> 1) * kTokWarp;
    const int64_t chunks = p.K / kChunk;
    const uint4* bp[kNT];  // B column g of n-tile n: token t0 + 4n + g / 2, its hi (g even) or lo words
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
        const int64_t t = t0 + 4 * n + (g >> 1);
        bp[n] = t < p.n ? reinterpret_cast<const uint4*>(p.act.data + t * chunks * kChunkWords +
                                                         (g & 1) * 64 + q * 16)
                        : nullptr;
    }
    auto load_w = [&](int64_t c, WeightRegs& r) {
#pragma unroll
        for (int m = 0; m < kMT; ++m) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const uint4* src = reinterpret_cast<const uint4*>(p.w + (row0 + m * 16 + h * 8 + g) * p.ld +
                                                                  c * 128 + q * 32);
                r.w[m][h][0] = __ldg(src);
                r.w[m][h][1] = __ldg(src + 1);
            }
            const int64_t si = ((row0 + m * 16) >> 7) * p.ld_scale + c;
            r.ws[m] = p.scale_e8m0 ? e8m0_to_f(__ldg(static_cast<const uint8_t*>(p.scale) + si))
                                   : __ldg(static_cast<const float*>(p.scale) + si);
        }
    };
    float acc[kMT][kNT][4];
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
        for (int n = 0; n < kNT; ++n)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[m][n][v] = 0.0f;
    WeightRegs cur, nxt;
    load_w(0, cur);
#pragma unroll 1
    for (int64_t c = 0; c < chunks; ++c) {
        if (c + 1 < chunks) load_w(c + 1, nxt);
        float d[kMT][kNT][4];
#pragma unroll
        for (int m = 0; m < kMT; ++m)
#pragma unroll
            for (int n = 0; n < kNT; ++n)
#pragma unroll
                for (int v = 0; v < 4; ++v) d[m][n][v] = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {  // k-steps 2i and 2i + 1: B words 4i .. 4i + 3
            uint4 b[kNT];
#pragma unroll
            for (int n = 0; n < kNT; ++n)
                b[n] = bp[n] == nullptr ? make_uint4(0, 0, 0, 0) : __ldg(bp[n] + c * (kChunkWords / 4) + i);
#pragma unroll
            for (int m = 0; m < kMT; ++m)
#pragma unroll
                for (int k = 0; k < 2; ++k) {  // k-step s = 2i + k: word s of the rows' 32 bytes
                    const int s = 2 * i + k;
                    const uint32_t w0 = word_of(cur.w[m][0], s), w1 = word_of(cur.w[m][1], s);
                    const uint32_t a[4] = {fp8x2_to_f16x2(w0), fp8x2_to_f16x2(w1), fp8x2_to_f16x2(w0 >> 16),
                                           fp8x2_to_f16x2(w1 >> 16)};
#pragma unroll
                    for (int n = 0; n < kNT; ++n)
                        mma16816(d[m][n], a, k == 0 ? b[n].x : b[n].z, k == 0 ? b[n].y : b[n].w);
                }
        }
#pragma unroll
        for (int m = 0; m < kMT; ++m)
#pragma unroll
            for (int n = 0; n < kNT; ++n)
#pragma unroll
                for (int v = 0; v < 4; ++v) acc[m][n][v] = fmaf(cur.ws[m], d[m][n][v], acc[m][n][v]);
        if (c + 1 < chunks) cur = nxt;
    }
    // acc[m][n] = rows (g, g + 8) x columns 2q (hi), 2q + 1 (lo) of token t0 + 4n + q
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
        const int64_t t = t0 + 4 * n + q;
        if (t >= p.n) continue;
        const float inv = p.act.inv[t];
#pragma unroll
        for (int m = 0; m < kMT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                p.y[t * p.ldy + row0 + m * 16 + h * 8 + g] = (acc[m][n][2 * h] + acc[m][n][2 * h + 1]) * inv;
    }
}

}  // namespace

bool linear_gemm_supported(const WeightRef& w) {
    return w.format == 1 && w.in_dim % kChunk == 0 && w.out_dim % kRowsBlock == 0 &&
           reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.ld % 16 == 0;
}

void launch_linear_gemm(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n,
                        Scratch& scratch, Stream s) {
    if (n == 0) return;
    const cudaStream_t st = as_stream(s);
    auto* words = static_cast<uint32_t*>(scratch.get(8, size_t(n * w.in_dim + n) * sizeof(uint32_t)));
    const ActChunks act{words, reinterpret_cast<float*>(words + n * w.in_dim)};
    launch_act_rows(x, ldx, n, w.in_dim, act, st, true);
    const Params p{static_cast<const uint8_t*>(w.data),
                   w.ld,
                   w.scale,
                   w.ld_scale,
                   w.scale_e8m0,
                   act,
                   y,
                   ldy,
                   n,
                   w.in_dim};
    const dim3 grid(unsigned(w.out_dim / kRowsBlock), unsigned((n + kTokBlock - 1) / kTokBlock));
    linear_gemm_kernel<<<grid, 32 * kWarps, 0, st>>>(p);
}

}  // namespace di::cuda
