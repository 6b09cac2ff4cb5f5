// y[n, out] = x[n, in] . W^T in the native precision for a decode step's few rows (up to 16) on the FP8
// tensor cores (mma.sync m16n8k32 e4m3 x e4m3, f32 accumulation): x as the quantiser's e4m3 codes with a
// power-of-two scale per 128-element block (the copy cuBLASLt reads: fp8_gemm.h), W as the checkpoint's e4m3
// rows with their 128x128 block scales, read as they are (no scale conversion).
//   A cluster of KS blocks per tile of 32 weight rows: the cluster's 4 KS warps split the 128-element chunks
//   of K in order, each block adds its warps' partials in warp order, and the cluster adds its blocks' in
//   block order through distributed shared memory (no scratch, no atomics).
//   Chunk c for thread (g = lane / 4, q = lane % 4): the 32 bytes at K offset 128 c + 32 q of weight rows
//   g, g + 8, g + 16, g + 24 and of token rows g and g + 8. K-step s (0..3) of the chunk takes bytes
//   8s .. 8s + 3 of each as the A registers a0 / a1 (B: b0) and bytes 8s + 4 .. 8s + 7 as a2 / a3 (b1): the
//   mma's K positions are a permutation of the chunk's, the same for both operands, so the products are those
//   of the dot product.
//   A chunk's four k-steps sum into a fresh fragment (the tensor cores keep ~14 bits there), which is then
//   multiplied by the weight block's scale times the token block's scale and added to the thread's f32 sums:
//   the promotion every 128 elements of DeepSeek's FP8 GEMMs.
//   Weight and token bytes come through S chunk slots a warp in shared memory (cp.async), so a warp keeps S
//   chunks in flight without holding them in registers; each lane reads back only the bytes it copied.
//   Up to kLinearFp8MmaQuantRows rows each warp quantises its chunks of the f32 rows itself instead (the
//   quantiser's expressions, so its bits, without its launch); every block redoes its K range's share of
//   that work, which more rows would make cost more than the launch it saves.
//   The kernel starts early (early_launch.cuh): its first weight copies and the weights' scales are in flight
//   before it waits for the kernel that writes x.
// A token's sums do not depend on the other tokens or on n (the split depends on out and in only):
// deterministic, and batch-invariant among the row counts it takes.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/env_switch.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 4, kRows = 32, kStages = 4, kMaxCluster = 8;
// Bytes a quantised token row of a chunk takes in shared memory: 128 and padding, so that the 8 lanes of a
// 16-byte load phase (two rows g, four q each) read distinct banks.
constexpr int kTokRow = 144;

struct Params {
    const uint8_t* q;  // [n, in] e4m3 codes, row stride ldq bytes (kQuant: unused)
    int64_t ldq;
    const float* sx;  // [in / 128][rows]
    int64_t rows;
    const float* x;  // kQuant: [n, in] f32, row stride ldx
    int64_t ldx;
    const uint8_t* w;  // [out, in] e4m3, row stride ld bytes
    int64_t ld;
    const void* scale;  // [ceil(out / 128), ld_scale], e8m0 bytes or f32
    int64_t ld_scale;
    bool scale_e8m0;
    float* y;
    int64_t ldy, n, in, out;
    int ks;  // blocks a cluster (a tile's split of K)
};

// A lane's 16-byte units of a chunk slot: weights [tile t][row g / g + 8][half], then (unless the warp
// quantises its own token rows) tokens [group][half].
template <int NG, bool kQuant>
constexpr int kUnits = kQuant ? 8 : 8 + 2 * NG;

// Where a block's shared memory goes: [warp][slot] staging units; kQuant: [warp][chunk][token] quantised
// rows; [warp][chunk][2 + token] scales (the two tiles' weight block scales, then x's); the warps' partials
// [warp][token][row]; the block's [token][row].
struct Smem {
    int max_cpw, slots;
    int64_t stage, toks, scales, red, part, bytes;
    __host__ __device__ Smem(int ng, bool quant, int ks, int64_t chunks) {
        const int all = kWarps * ks, tok = 8 * ng;
        max_cpw = int((chunks + all - 1) / all);
        slots = max_cpw < kStages ? (max_cpw < 1 ? 1 : max_cpw) : kStages;
        stage = 0;
        toks = stage + int64_t(kWarps) * slots * (quant ? 8 : 8 + 2 * ng) * 32 * 16;
        scales = toks + (quant ? int64_t(kWarps) * max_cpw * tok * kTokRow : 0);
        red = scales + int64_t(kWarps) * max_cpw * (2 + tok) * 4;
        part = red + int64_t(kWarps) * tok * kRows * 4;
        bytes = part + int64_t(tok) * kRows * 4;
    }
};

// Chunks [c0, c1) of the warp at global index gw of the cluster's `warps`.
__device__ __forceinline__ void warp_range(int64_t chunks, int gw, int warps, int& c0, int& c1) {
    c0 = int(chunks * gw / warps), c1 = int(chunks * (gw + 1) / warps);
}

// A chunk's copies into a slot: the weights' (stage_weights) and, unless the warp quantises its own token
// rows, the tokens' (stage_tokens: x's copy is written by an earlier kernel, so only after wait_prior).
__device__ __forceinline__ void stage_weights(const Params& p, int64_t row0, int c, int g, int q, int lane,
                                              uint4* slot) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {  // tile u / 4, row g or g + 8 ((u / 2) % 2), half u % 2
        const int64_t row = row0 + (u / 4) * 16 + ((u / 2) % 2) * 8 + g;
        wg::cp_async16(wg::smem_addr(slot + u * 32 + lane),
                       p.w + row * p.ld + c * 128 + q * 32 + (u % 2) * 16, true);
    }
}

template <int NG, bool kQuant>
__device__ __forceinline__ void stage_tokens(const Params& p, int c, int g, int q, int lane, uint4* slot) {
    if constexpr (!kQuant)
#pragma unroll
        for (int u = 0; u < 2 * NG; ++u) {
            const int64_t tok = (u / 2) * 8 + g;
            const bool ok = tok < p.n;
            wg::cp_async16(wg::smem_addr(slot + (8 + u) * 32 + lane),
                           p.q + (ok ? tok : 0) * p.ldq + c * 128 + q * 32 + (u % 2) * 16, ok);
        }
}

// The warp's chunks [c0, c1) of the first 8 NG rows of x quantised as act_quant.cu does (a chunk a
// 128-element block): e4m3 bytes to toks ([chunk][token] rows of kTokRow bytes; zeros past n) and each
// block's scale to scales[chunk * stride + 2 + token] (0 past n).
template <int NG>
__device__ __forceinline__ void quantise_chunks(const Params& p, int c0, int c1, int lane,
                                                unsigned char* toks, float* scales, int stride) {
    for (int c = c0; c < c1; ++c)
        for (int t = 0; t < 8 * NG; ++t) {
            unsigned char* row = toks + ((c - c0) * 8 * NG + t) * kTokRow;
            if (t >= p.n) {  // the same for the whole warp
#pragma unroll
                for (int i = 0; i < 4; ++i) row[lane + 32 * i] = 0;
                if (lane == 0) scales[(c - c0) * stride + 2 + t] = 0.0f;
                continue;
            }
            const float* src = p.x + int64_t(t) * p.ldx + int64_t(c) * 128;
            float v[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) v[i] = src[lane + 32 * i];  // strided slices: no vector loads
            const float s = act_quant_scale(warp_block_amax(v));
#pragma unroll
            for (int i = 0; i < 4; ++i) row[lane + 32 * i] = act_quant_e4m3(v[i], s).__x;
            if (lane == 0) scales[(c - c0) * stride + 2 + t] = s;
        }
}

// One chunk's 4 k-steps for every (token group, tile), then the promotion into acc. tok: the chunk's
// quantised token rows where the warp made them (kQuant), else the token bytes are in the slot.
template <int NG, bool kQuant>
__device__ __forceinline__ void compute_chunk(const uint4* slot, const unsigned char* tok, int lane,
                                              const float (&ws)[2], const float (&sxv)[NG][2],
                                              float (&acc)[NG][2][4]) {
    uint4 wv[8], xv[2 * NG];
#pragma unroll
    for (int u = 0; u < 8; ++u) wv[u] = slot[u * 32 + lane];
#pragma unroll
    for (int u = 0; u < 2 * NG; ++u)
        xv[u] = kQuant ? *reinterpret_cast<const uint4*>(tok + ((u / 2) * 8 + (lane >> 2)) * kTokRow +
                                                         (lane & 3) * 32 + (u % 2) * 16)
                       : slot[(8 + u) * 32 + lane];
    auto word = [](const uint4(&v)[2], int i) {  // word i (0..7) of a 32-byte piece
        const uint4& h = v[i / 4];
        const int j = i % 4;
        return j == 0 ? h.x : j == 1 ? h.y : j == 2 ? h.z : h.w;
    };
#pragma unroll
    for (int t = 0; t < 2; ++t) {
        const uint4 r0[2] = {wv[4 * t], wv[4 * t + 1]}, r1[2] = {wv[4 * t + 2], wv[4 * t + 3]};
#pragma unroll
        for (int gi = 0; gi < NG; ++gi) {
            const uint4 tx[2] = {xv[2 * gi], xv[2 * gi + 1]};
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const uint32_t a[4] = {word(r0, 2 * s), word(r1, 2 * s), word(r0, 2 * s + 1),
                                       word(r1, 2 * s + 1)};
                mma::mma_e4m3(d, a, word(tx, 2 * s), word(tx, 2 * s + 1));
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[gi][t][e] = fmaf(d[e], ws[t] * sxv[gi][e & 1], acc[gi][t][e]);
        }
    }
}

// grid (KS, out / 32), clusters of KS blocks along x, 128 threads.
template <int NG, bool kQuant>
__global__ void __launch_bounds__(32 * kWarps) linear_fp8mma_kernel(Params p) {
    allow_early_next();
    constexpr int U = kUnits<NG, kQuant>, kTok = 8 * NG, kStride = 2 + kTok;
    extern __shared__ __align__(16) unsigned char smem[];
    cg::cluster_group cluster = cg::this_cluster();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int ks = int(cluster.block_rank());
    const int64_t row0 = int64_t(blockIdx.y) * kRows, chunks = p.in / 128;
    const Smem at(NG, kQuant, p.ks, chunks);
    const int slots = at.slots;
    uint4* stage = reinterpret_cast<uint4*>(smem + at.stage) + int64_t(warp) * slots * U * 32;
    unsigned char* toks = smem + at.toks + int64_t(warp) * at.max_cpw * kTok * kTokRow;
    float* scales = reinterpret_cast<float*>(smem + at.scales) + warp * at.max_cpw * kStride;
    float* red = reinterpret_cast<float*>(smem + at.red);
    float* part = reinterpret_cast<float*>(smem + at.part);

    int c0, c1;
    warp_range(chunks, ks * kWarps + warp, kWarps * p.ks, c0, c1);
    for (int s = 0; s < slots && c0 + s < c1; ++s)
        stage_weights(p, row0, c0 + s, g, q, lane, stage + s * U * 32);
    for (int i = lane; i < (c1 - c0) * 2; i += 32) {  // the two tiles' weight block scales
        const int64_t si = ((row0 + (i % 2) * 16) / 128) * p.ld_scale + c0 + i / 2;
        scales[(i / 2) * kStride + i % 2] = p.scale_e8m0 ? e8m0_to_f(static_cast<const uint8_t*>(p.scale)[si])
                                                         : static_cast<const float*>(p.scale)[si];
    }
    wait_prior();  // x (or its quantised copy) is written by an earlier kernel
    // one group a slot (the first also holds every slot's weight copies), empty past c1: every wait counts
    // the same
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
        if (s < slots && c0 + s < c1) stage_tokens<NG, kQuant>(p, c0 + s, g, q, lane, stage + s * U * 32);
        wg::cp_async_commit();
    }
    if constexpr (kQuant) {
        quantise_chunks<NG>(p, c0, c1, lane, toks, scales, kStride);
    } else {
        for (int i = lane; i < (c1 - c0) * kTok; i += 32) {
            const int tok = i % kTok;
            scales[(i / kTok) * kStride + 2 + tok] =
                tok < p.n ? p.sx[int64_t(c0 + i / kTok) * p.rows + tok] : 0.0f;
        }
    }
    __syncwarp();
    float acc[NG][2][4] = {};
#pragma unroll 1
    for (int c = c0; c < c1; ++c) {
        const int s = (c - c0) % slots;
        wg::cp_async_wait<kStages - 1>();  // chunk c's group (all but the last kStages - 1 are complete)
        const float* sc = scales + (c - c0) * kStride;
        const float ws[2] = {sc[0], sc[1]};
        float sxv[NG][2];
#pragma unroll
        for (int gi = 0; gi < NG; ++gi)
            sxv[gi][0] = sc[2 + 8 * gi + 2 * q], sxv[gi][1] = sc[3 + 8 * gi + 2 * q];
        // the slot's bytes are read into registers here, before the same lane copies the next chunk over them
        compute_chunk<NG, kQuant>(stage + s * U * 32, toks + (c - c0) * kTok * kTokRow, lane, ws, sxv, acc);
        if (c + slots < c1) {
            stage_weights(p, row0, c + slots, g, q, lane, stage + s * U * 32);
            stage_tokens<NG, kQuant>(p, c + slots, g, q, lane, stage + s * U * 32);
        }
        wg::cp_async_commit();
    }
    wg::cp_async_wait<0>();
    // the warps' partials, then the block's in warp order
#pragma unroll
    for (int gi = 0; gi < NG; ++gi)
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int tok = 8 * gi + 2 * q + (e & 1), row = t * 16 + (e >> 1) * 8 + g;
                red[(warp * kTok + tok) * kRows + row] = acc[gi][t][e];
            }
    __syncthreads();
    for (int i = threadIdx.x; i < kTok * kRows; i += blockDim.x) {
        float s = red[i];
        for (int w = 1; w < kWarps; ++w) s += red[w * kTok * kRows + i];
        part[i] = s;
    }
    cluster.sync();  // every block's partials are written
    // block ks writes the outputs i = ks, ks + KS, ...: the blocks' partials in block order
    for (int i = int(threadIdx.x) * p.ks + ks; i < kTok * kRows; i += int(blockDim.x) * p.ks) {
        float s = 0.0f;
        for (int b = 0; b < p.ks; ++b) s += cluster.map_shared_rank(part, b)[i];
        const int tok = i / kRows, row = i % kRows;
        if (tok < p.n && row0 + row < p.out) p.y[int64_t(tok) * p.ldy + row0 + row] = s;
    }
    cluster.sync();  // no block leaves while another reads its partials
}

// DEEPINFER_FP8_MMA_ONE_WAVE=1: round the split down, so that the grid fits the two blocks a multiprocessor
// holds (the staging area takes ~100 KB a block) in one wave; rounded up (the default), 4,096- and 8,192-row
// matrices launch 384 and 512 blocks: 1.45 and 1.94 waves, the matrices on which fp8_mma measured slower
// than cuBLASLt. Off until the GPU measures it (tools/gpu_next_check.sh PART=fp8).
const bool one_wave = env_switch("DEEPINFER_FP8_MMA_ONE_WAVE", false);

// Blocks a tile's K splits into: about two blocks a multiprocessor over the tiles, at most kMaxCluster, each
// warp at least one chunk.
int cluster_size(int64_t out, int64_t in) {
    const int64_t tiles = out / kRows, chunks = in / 128;
    const int64_t want = one_wave ? 2 * sm_count() / tiles : (2 * sm_count() + tiles - 1) / tiles;
    return int(std::clamp<int64_t>(std::min<int64_t>(want, chunks / kWarps), 1, kMaxCluster));
}

template <int NG, bool kQuant>
void launch(const Params& p, cudaStream_t s) {
    raise_dynamic_smem(linear_fp8mma_kernel<NG, kQuant>, 227 * 1024);
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(p.ks), attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = early_launch_enabled() ? 1 : 0;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(p.ks), unsigned(p.out / kRows));
    cfg.blockDim = dim3(32 * kWarps);
    cfg.dynamicSmemBytes = size_t(Smem(NG, kQuant, p.ks, p.in / 128).bytes);
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 2;
    DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, linear_fp8mma_kernel<NG, kQuant>, p));
}

// Where dispatch gives fp8_mma the call: from min_rows rows (0: never) on matrices of at most max_out output
// rows (0: any). By default from 2 rows on <= 2,048 rows, as measured on the H200 (docs/cuda.md): at 16 rows
// faster than cuBLASLt on q_a, wo_a's groups and the shared expert's w1 / w3 (1,024 and 2,048 rows), slower
// on 4,096 and more; at 4 rows as fast as the f32 kernels on the dequantised copy; at 1 row slower than
// split_rows. DEEPINFER_FP8_MMA="<rows>[:<most output rows>]" sets both, "0" turns it off.
struct Fp8MmaDispatch {
    int64_t min_rows = 2, max_out = 2048;
};
Fp8MmaDispatch dispatch_from_env() {
    Fp8MmaDispatch d;
    const char* v = std::getenv("DEEPINFER_FP8_MMA");
    if (v == nullptr) return d;
    d.max_out = 0;
    char* end = nullptr;
    d.min_rows = std::max<long long>(0, std::strtoll(v, &end, 10));
    if (end != nullptr && *end == ':') d.max_out = std::max<long long>(0, std::strtoll(end + 1, nullptr, 10));
    return d;
}
const Fp8MmaDispatch fp8mma_dispatch = dispatch_from_env();

}  // namespace

bool linear_fp8mma_dispatched(const WeightRef& w, int64_t n) {
    const Fp8MmaDispatch& d = fp8mma_dispatch;
    return d.min_rows > 0 && n >= d.min_rows && (d.max_out == 0 || w.out_dim <= d.max_out);
}

bool linear_fp8mma_supported(const WeightRef& w, int64_t n) {
    if (w.format != 1 || n < 1 || n > kLinearFp8MmaMaxRows || w.in_dim % 128 != 0 || w.out_dim % kRows != 0 ||
        w.ld % 16 != 0 || reinterpret_cast<uintptr_t>(w.data) % 16 != 0)
        return false;
    const int ks = cluster_size(w.out_dim, w.in_dim);  // the largest layouts it may launch with
    return Smem(2, false, ks, w.in_dim / 128).bytes <= 227 * 1024 &&
           Smem(1, true, ks, w.in_dim / 128).bytes <= 227 * 1024;
}

void launch_linear_fp8mma(const uint8_t* q, int64_t ldq, const float* sx, int64_t rows, const float* x,
                          int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n, Stream s) {
    if (n == 0) return;
    Params p{q,
             ldq,
             sx,
             rows,
             x,
             ldx,
             static_cast<const uint8_t*>(w.data),
             w.ld,
             w.scale,
             w.ld_scale,
             w.scale_e8m0,
             y,
             ldy,
             n,
             w.in_dim,
             w.out_dim,
             cluster_size(w.out_dim, w.in_dim)};
    const cudaStream_t st = as_stream(s);
    if (q == nullptr)  // n <= kLinearFp8MmaQuantRows
        launch<1, true>(p, st);
    else if (n <= 8)
        launch<1, false>(p, st);
    else
        launch<2, false>(p, st);
}

}  // namespace di::cuda
