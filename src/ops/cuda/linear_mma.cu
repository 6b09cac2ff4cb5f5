// y[n, out] = x[n, in] . W^T for fp8 block-scaled weights on the tensor cores (mma.sync m16n8k16), f32
// activations as hi/lo f16 chunks in the fp8 order of mma_frag.cuh (one launch prepares them):
//   block (G token groups of 4, tile of 16 MT rows), W warps each over a W-th of K; a thread streams 32
//   bytes of rows g and g + 8 per chunk and converts them with one cvt per f16 pair (e4m3 is exact in f16),
//   once for all G groups: each group is its own n8 mma on the same A fragments
//   each chunk's partial product is multiplied by 1/s of the token's chunk and by the 128x128 block scale
//   of the weight (a 16-row tile lies in one block), then the warps' partials are added in warp order
// Token groups are x-fastest in the grid, so the blocks that read a row tile run together and the L2 serves
// the tile's repeat reads for groups after the first G. A token's sums do not depend on the other tokens or
// on G (an mma's columns are independent): deterministic and batch-invariant.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdlib>

#include "ops/cuda/mma_frag.cuh"

namespace di::cuda {
namespace {

using namespace mma;

struct Params {
    const uint8_t* w;
    int64_t ld;  // fp8 bytes, row stride in bytes
    const void* scale;
    int64_t ld_scale;  // [out / 128, in / 128]
    bool scale_e8m0;
    ActChunks act;  // [n, in / 128]
    float* y;
    int64_t ldy;
    int64_t n, K, out;
};

template <int MT, int G>
struct Frag {
    uint4 w[MT][2][2];  // [tile][row g, g + 8][16-byte half]
    float ws[MT];       // the tile's block scale for this chunk
    uint4 b[G][4];      // per token group
    float inv[G];
};

template <int MT, int G>
__device__ __forceinline__ void load_frag(const Params& p, int64_t row0, const uint32_t* const (&act)[G],
                                          const float* const (&inv)[G], int c, int g, int q, Frag<MT, G>& f) {
#pragma unroll
    for (int t = 0; t < MT; ++t) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint4* src =
                reinterpret_cast<const uint4*>(p.w + (row0 + t * 16 + r * 8 + g) * p.ld + c * 128 + q * 32);
            f.w[t][r][0] = __ldcs(src);
            f.w[t][r][1] = __ldcs(src + 1);
        }
        const int64_t si = ((row0 + t * 16) >> 7) * p.ld_scale + c;
        f.ws[t] = p.scale_e8m0 ? e8m0_to_f(__ldg(static_cast<const uint8_t*>(p.scale) + si))
                               : __ldg(static_cast<const float*>(p.scale) + si);
    }
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {
        if (act[gi] != nullptr) {
            const uint4* b = reinterpret_cast<const uint4*>(act[gi] + int64_t(c) * kChunkWords);
#pragma unroll
            for (int i = 0; i < 4; ++i) f.b[gi][i] = __ldg(b + i);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) f.b[gi][i] = make_uint4(0, 0, 0, 0);
        }
        f.inv[gi] = inv[gi] != nullptr ? __ldg(inv[gi] + c) : 0.0f;
    }
}

template <int MT, int G>
__device__ __forceinline__ void compute_frag(const Frag<MT, G>& f, float (&acc)[MT][G][4]) {
#pragma unroll
    for (int t = 0; t < MT; ++t) {
        float d[G][4];
#pragma unroll
        for (int gi = 0; gi < G; ++gi)
#pragma unroll
            for (int e = 0; e < 4; ++e) d[gi][e] = 0.0f;
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const uint32_t w0 = word_of(f.w[t][0], s), w1 = word_of(f.w[t][1], s);
            const uint32_t a[4] = {fp8x2_to_f16x2(w0), fp8x2_to_f16x2(w1), fp8x2_to_f16x2(w0 >> 16),
                                   fp8x2_to_f16x2(w1 >> 16)};
#pragma unroll
            for (int gi = 0; gi < G; ++gi)
                mma16816(d[gi], a, word_of(f.b[gi], 2 * s), word_of(f.b[gi], 2 * s + 1));
        }
#pragma unroll
        for (int gi = 0; gi < G; ++gi) {
            const float m = f.inv[gi] * f.ws[t];  // both powers of two for UE8M0 scales; 1/s is one always
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[t][gi][e] = fmaf(m, d[gi][e], acc[t][gi][e]);
        }
    }
}

// grid (ceil(n / (4 G)), out / (16 MT)), 32 W threads.
template <int MT, int G>
__global__ void __launch_bounds__(256) linear_mma_kernel(Params p) {
    allow_early_next();
    extern __shared__ float red[];  // [W][16 MT][8 G]
    constexpr int R = 16 * MT;
    const int W = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2,
              q = lane & 3;
    const int64_t t0 = int64_t(blockIdx.x) * 4 * G, row0 = int64_t(blockIdx.y) * R;
    const int nt = int(min(int64_t(4 * G), p.n - t0));
    const int64_t chunks = p.K / kChunk, cpw = chunks / W;
    const uint32_t* act[G];
    const float* inv[G];
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {
        const int64_t brow = 4 * gi + (g >> 1) < nt ? t0 + 4 * gi + (g >> 1) : -1,
                      crow = 4 * gi + q < nt ? t0 + 4 * gi + q : -1;
        act[gi] = brow < 0 ? nullptr : p.act.data + brow * chunks * kChunkWords + (g & 1) * 64 + q * 16;
        inv[gi] = crow < 0 ? nullptr : p.act.inv + crow * chunks;
    }
    float acc[MT][G][4];
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int gi = 0; gi < G; ++gi)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[t][gi][e] = 0.0f;
    const int c0 = int(warp * cpw), c1 = int((warp + 1) * cpw);
    Frag<MT, G> f0, f1;
    load_frag(p, row0, act, inv, c0, g, q, f0);
#pragma unroll 1
    for (int c = c0; c < c1; c += 2) {
        if (c + 1 < c1) load_frag(p, row0, act, inv, c + 1, g, q, f1);
        compute_frag(f0, acc);
        if (c + 1 < c1) {
            if (c + 2 < c1) load_frag(p, row0, act, inv, c + 2, g, q, f0);
            compute_frag(f1, acc);
        }
    }
#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int gi = 0; gi < G; ++gi)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float* dst = red + (warp * R + t * 16 + r * 8 + g) * 8 * G + gi * 8 + 2 * q;
                dst[0] = acc[t][gi][2 * r], dst[1] = acc[t][gi][2 * r + 1];
            }
    __syncthreads();
    for (int i = threadIdx.x; i < R * nt; i += blockDim.x) {
        const int lr = i / nt, t = i % nt;
        float s = 0.0f;
        for (int w = 0; w < W; ++w) {
            const float* src = red + (w * R + lr) * 8 * G + (t >> 2) * 8 + 2 * (t & 3);
            s += src[0] + src[1];
        }
        p.y[(t0 + t) * p.ldy + row0 + lr] = s;
    }
}

// Token groups of 4 per block: each block reads its weight tile once for up to 16 tokens. The weights'
// f16 conversion is shared by the groups; their activation fragments are registers of their own (four
// groups keep one row tile per warp). The most groups that still leave every multiprocessor two blocks
// (16-row tiles: a 1024-row matrix has 64, so at 16 tokens it keeps one group a block); one where rows are
// plenty enough for two tiles per warp. On the H200 at 16 / 64 tokens (us, 1 group -> these): o_b 8192->4096
// 39.1 -> 36.2 / 137.3 -> 111.2, shared W1 4096->2048 13.5 -> 13.4 / 43.0 -> 34.7. DEEPINFER_MMA_GROUPS
// =1|2|4 caps it (same bits at any cap: an A/B knob for the benchmarks).
int mma_groups_per_block(int64_t groups, int64_t tiles, bool two_tiles) {
    static const int cap = [] {
        const char* e = std::getenv("DEEPINFER_MMA_GROUPS");
        const int v = e != nullptr ? std::atoi(e) : 4;
        return v >= 4 ? 4 : v >= 2 ? 2 : 1;
    }();
    // q_b-like (K 1024, 32K rows): 32-row tiles read the activations half as often; at 16 and 64 tokens
    // faster than 2 or 4 groups of 16-row tiles (37.5 / 135.1 us against 40.6 / 141.8)
    if (two_tiles) return 1;
    const int64_t want = 2 * int64_t(sm_count());
    for (int G : {4, 2})
        if (G <= cap && groups >= G && tiles * ((groups + G - 1) / G) >= want) return G;
    return 1;
}

// Warps splitting K: 4 where the chunks allow, 8 when there are too few row tiles to give every
// multiprocessor two blocks (a 1024-row matrix has 64).
int warps_for(int64_t chunks, int64_t tiles) {
    if (tiles < 2 * int64_t(sm_count()) && chunks % 8 == 0) return 8;
    return chunks % 4 == 0 ? 4 : chunks % 2 == 0 ? 2 : 1;
}

template <int MT, int G>
void run_mma(const Params& p, int64_t chunks, unsigned gx, cudaStream_t st) {
    const int W = warps_for(chunks, p.out / (16 * MT));
    linear_mma_kernel<MT, G>
        <<<dim3(gx, unsigned(p.out / (16 * MT))), 32 * W, size_t(W * 16 * MT * 8 * G) * 4, st>>>(p);
}

}  // namespace

bool linear_mma_supported(const WeightRef& w, int64_t n) {
    return n >= 1 && w.format == 1 && w.in_dim % kChunk == 0 && w.out_dim % 16 == 0 &&
           reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.ld % 16 == 0;
}

void launch_linear_mma(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n,
                       Scratch& scratch, Stream s) {
    if (n == 0) return;
    const cudaStream_t st = as_stream(s);
    const int64_t chunks = w.in_dim / kChunk;
    auto* words =
        static_cast<uint32_t*>(scratch.get(8, size_t(n * w.in_dim + n * chunks) * sizeof(uint32_t)));
    const ActChunks act{words, reinterpret_cast<float*>(words + n * w.in_dim)};
    launch_act_chunks(x, ldx, n, w.in_dim, act, true, st);
    const Params p{static_cast<const uint8_t*>(w.data),
                   w.ld,
                   w.scale,
                   w.ld_scale,
                   w.scale_e8m0,
                   act,
                   y,
                   ldy,
                   n,
                   w.in_dim,
                   w.out_dim};
    const int64_t groups = (n + 3) / 4;
    // Two row tiles per warp where rows are plenty (with one token group); else one, and up to four groups.
    const bool two_tiles = w.out_dim % 32 == 0 && w.out_dim >= 32 * 2 * int64_t(sm_count());
    const int G = mma_groups_per_block(groups, w.out_dim / 16, two_tiles);
    const unsigned gx = unsigned((groups + G - 1) / G);
    if (two_tiles)  // G == 1 (mma_groups_per_block)
        run_mma<2, 1>(p, chunks, gx, st);
    else if (G == 4)
        run_mma<1, 4>(p, chunks, gx, st);
    else if (G == 2)
        run_mma<1, 2>(p, chunks, gx, st);
    else
        run_mma<1, 1>(p, chunks, gx, st);
}

}  // namespace di::cuda
