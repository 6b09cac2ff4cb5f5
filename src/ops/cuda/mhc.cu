// mHC pre (and the hc head): the norm and the M = (2 + hc) * hc mixing dot products in double, then the
// sigmoid / softmax / Sinkhorn step, then the collapse x = sum_i pre_i stream_i. Two variants:
//   split_k:  the hc * D columns split over blocks of 512 (a float4 per thread), each block summing its
//             columns' squares and M products for 8 tokens (32 in a prefill; fn columns in registers across
//             them; each thread's four columns in f32, then double; a warp sums its lanes' M + 1 values
//             together in one halving tree, warp_sum_slots);
//             a finish block per token adds the partials (a warp per value, fixed tree), runs Sinkhorn with
//             one lane per matrix element (each lane divides its own element: 2 * iters - 1 dependent
//             divisions, not hc^2 times that), and collapses. mix = inv_rms * sum v fn (the reference rounds
//             v * inv_rms to f32 first: a relative difference of ~1e-7 in mix).
//   per_mix:  the first kernel, kept as the fallback: one block per (mix row, token), Sinkhorn on one
//             thread (its double divisions in series dominate: ~100 us per call on V4-Flash).
// From kMhcDmmaMinTokens tokens (a prefill), split_k's partial sums come from mhc_mix_dmma.cu instead (the
// FP64 tensor cores, four splits); for hc = 4 the finish then runs as a warp a token for pre / post / comb
// and a bandwidth-bound collapse (mhc_coef_kernel, mhc_collapse_kernel), otherwise the same finish kernel
// follows. Both deterministic (fixed reduction trees). launch_mhc_pre_norm (fused_kernels.h) runs split_k
// with the following rms_norm in the finish kernel. Every kernel reading the streams takes their type S
// (hc_streams.cuh: f32, or the native precision's bf16) and sums what it reads as f32.
#include <cstdlib>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/fused_kernels.h"
#include "ops/cuda/hc_streams.cuh"

namespace di::cuda {
namespace {

constexpr int kMaxHc = 8;

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

// split_k's weights from a token's summed partials (its finish kernel and, for a prefill, mhc_coef_kernel:
// the same expressions on the sums): the mixes' common factor f32(1 / rms) of the streams, then pre and post.
__device__ __forceinline__ double mix_inv(double sumsq, int64_t width, float eps) {
    return double(float(1.0 / sqrt(sumsq / double(width) + double(eps))));
}
__device__ __forceinline__ float pre_weight(double inv, double mix, double scale, double base, float hc_eps) {
    return float(sigmoid_d(inv * mix * scale + base) + hc_eps);
}
__device__ __forceinline__ float post_weight(double inv, double mix, double scale, double base) {
    return float(2.0 * sigmoid_d(inv * mix * scale + base));
}

// grid (M, n): block (m, t) computes mix[t, m] = fn[m] . rms(streams[t]); every block recomputes the token's
// norm (hc * D * 4 bytes, L2-resident) so that a single token still spreads over M blocks.
template <class S>
__global__ void __launch_bounds__(256) mhc_mix_kernel(MhcParams p, double* mix_out) {
    allow_early_next();
    __shared__ double red[32];
    const int64_t m = blockIdx.x, t = blockIdx.y, width = p.hc * p.D, M = gridDim.x;
    const S* v = static_cast<const S*>(p.streams) + t * width;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) ss += double(hc::ld1(v + i)) * hc::ld1(v + i);
    ss = block_sum_d(ss, red);
    const float inv = float(1.0 / sqrt(ss / double(width) + double(p.norm_eps)));
    const float* f = p.fn + m * p.ld_fn;
    double acc = 0;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) acc += double(hc::ld1(v + i) * inv) * f[i];
    acc = block_sum_d(acc, red);
    if (threadIdx.x == 0) mix_out[t * M + m] = acc;
}

// One block per token: pre / post / comb from the mixes, then the collapse.
template <class S>
__global__ void __launch_bounds__(256) mhc_finish_kernel(MhcParams p, const double* mix_in) {
    allow_early_next();
    __shared__ double mix[(2 + kMaxHc) * kMaxHc];
    __shared__ float pre[kMaxHc];
    const int64_t t = blockIdx.x, width = p.hc * p.D;
    const int64_t M = p.head ? p.hc : (2 + p.hc) * p.hc;
    const S* v = static_cast<const S*>(p.streams) + t * width;
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) mix[m] = mix_in[t * M + m];
    __syncthreads();
    if (threadIdx.x == 0) {
        const int64_t hc = p.hc;
        for (int64_t i = 0; i < hc; ++i)
            pre[i] = float(sigmoid_d(mix[i] * p.scale[0] + p.base[i]) + p.hc_eps);
        if (!p.head) {
            for (int64_t i = 0; i < hc; ++i)
                p.post[t * p.ld_post + i] = float(2.0 * sigmoid_d(mix[hc + i] * p.scale[1] + p.base[hc + i]));
            double C[kMaxHc * kMaxHc];
            for (int64_t j = 0; j < hc; ++j) {
                double m = -INFINITY, sum = 0;
                for (int64_t k = 0; k < hc; ++k) {
                    const int64_t idx = 2 * hc + j * hc + k;
                    C[j * hc + k] = mix[idx] * p.scale[2] + p.base[idx];
                    m = fmax(m, C[j * hc + k]);
                }
                for (int64_t k = 0; k < hc; ++k) sum += (C[j * hc + k] = exp(C[j * hc + k] - m));
                for (int64_t k = 0; k < hc; ++k) C[j * hc + k] = C[j * hc + k] / sum + p.hc_eps;
            }
            for (int it = 0; it < 2 * p.sinkhorn_iters - 1; ++it) {
                const bool cols = (it % 2) == 0;  // columns first, then rows / columns alternate
                for (int64_t a = 0; a < hc; ++a) {
                    double s = 0;
                    for (int64_t b = 0; b < hc; ++b) s += cols ? C[b * hc + a] : C[a * hc + b];
                    for (int64_t b = 0; b < hc; ++b) (cols ? C[b * hc + a] : C[a * hc + b]) /= (s + p.hc_eps);
                }
            }
            for (int64_t i = 0; i < hc * hc; ++i) p.comb[t * p.ld_comb + i] = float(C[i]);
        }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < p.D; c += blockDim.x) {
        double acc = 0;
        for (int64_t i = 0; i < p.hc; ++i) acc += double(pre[i]) * hc::ld1(v + i * p.D + c);
        p.x[t * p.ld_x + c] = float(acc);
    }
}

constexpr int kSplitThreads = 128;
constexpr int kSplitCols = 4 * kSplitThreads;  // columns per split block, four per thread (one float4)
constexpr int kSplitTokens = 8;  // tokens per split block (32 from 2,048 tokens: see launch_split)
constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;

// Each of the P values of every lane (P a power of two <= 32) summed over the warp, in P - 1 + log2(32 / P)
// shuffles instead of P log2(32): each halving step keeps one half of the values (the lower half where the
// lane's bit o is clear) and adds the partner's copy of that half. Lane l returns the total of value
// l / (32 / P). A fixed tree: the same bits for the same inputs.
template <int N, int O, int P>
__device__ __forceinline__ void halve_slots(double (&v)[P], int lane) {
    const bool upper = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const double keep = upper ? v[N + i] : v[i], give = upper ? v[i] : v[N + i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, give, O);
    }
    if constexpr (N > 1) halve_slots<N / 2, O / 2>(v, lane);
}
template <int P>
__device__ __forceinline__ double warp_sum_slots(double (&v)[P], int lane) {
    static_assert(P >= 2 && P <= 32 && (P & (P - 1)) == 0);
    halve_slots<P / 2, 16>(v, lane);
#pragma unroll
    for (int o = 16 / P; o >= 1; o /= 2) v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
    return v[0];
}

// grid (splits, ceil(n / tokens)), block 128: part[(t * splits + s) * (M + 1) + 0] = sum of squares of token
// t's columns of split s, [.. + 1 + m] = sum v * fn[m] over them. Needs hc * D % 4 == 0 and 16-byte rows.
// kRows fn rows' loads are issued together (24: all of hc = 4's mixes at once; a loop of one load per row
// waited for each in turn, ~24 memory latencies per block). Where all M rows fit one group they are loaded
// once per block and kept in registers for all its tokens (reloading them per token from the L1 cost 48 KB
// of L1 traffic per token and split). Each thread's four columns are summed in f32 and widened once per row:
// the f32 -> f64 conversion runs at a quarter of the f64 rate, and converting every element cost more than
// the products (four f32 terms round to ~1e-7 of their magnitudes; the tests hold the result to 1e-6).
template <int kRows, class S>
__global__ void __launch_bounds__(kSplitThreads)
    mhc_split_kernel(MhcParams p, int M, int tokens, double* part) {
    constexpr int kSlots = kRows < 16 ? 16 : 32;  // the rows' products and the sum of squares, one spare
    static_assert(kRows < kSlots);
    allow_early_next();
    __shared__ double red[kSplitThreads / 32][kMaxMix + 1];
    const int64_t width = p.hc * p.D, splits = gridDim.x, s = blockIdx.x;
    const int64_t col = s * kSplitCols + 4 * int64_t(threadIdx.x);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool inside = col < width, hoisted = M <= kRows;
    float4 f[kRows];
    auto load_rows = [&](int m0) {
#pragma unroll
        for (int j = 0; j < kRows; ++j)
            f[j] = inside && m0 + j < M
                       ? __ldg(reinterpret_cast<const float4*>(p.fn + (m0 + j) * p.ld_fn + col))
                       : make_float4(0, 0, 0, 0);
    };
    if (hoisted) load_rows(0);
    const int64_t t0 = int64_t(blockIdx.y) * tokens, t_end = min(p.n, t0 + tokens);
    auto load_v = [&](int64_t t) {
        return inside && t < t_end ? hc::ld4(static_cast<const S*>(p.streams) + t * width + col)
                                   : make_float4(0, 0, 0, 0);
    };
    float4 v_next = load_v(t0);  // one token ahead: few warps an SM (registers), so each hides its own loads
    for (int64_t t = t0; t < t_end; ++t) {
        const float4 v = v_next;
        v_next = load_v(t + 1);
        const double ss = double(fmaf(v.w, v.w, fmaf(v.z, v.z, fmaf(v.y, v.y, v.x * v.x))));
        for (int m0 = 0; m0 < M; m0 += kRows) {
            if (!hoisted) load_rows(m0);
            // slots 0 .. kRows - 1: the rows' products; slot kRows: the sum of squares (first group only)
            double val[kSlots];
#pragma unroll
            for (int j = 0; j < kSlots; ++j)
                val[j] = j < kRows
                             ? double(fmaf(v.w, f[j].w, fmaf(v.z, f[j].z, fmaf(v.y, f[j].y, v.x * f[j].x))))
                         : j == kRows ? (m0 == 0 ? ss : 0.0)
                                      : 0.0;
            const double tot = warp_sum_slots<kSlots>(val, lane);
            const int slot = lane / (32 / kSlots);
            if (lane % (32 / kSlots) == 0) {
                if (slot < kRows && m0 + slot < M) red[warp][1 + m0 + slot] = tot;
                if (slot == kRows && m0 == 0) red[warp][0] = tot;
            }
        }
        __syncthreads();
        for (int m = threadIdx.x; m <= M; m += blockDim.x) {
            double acc = 0;
            for (int w = 0; w < kSplitThreads / 32; ++w) acc += red[w][m];
            part[(t * splits + s) * (M + 1) + m] = acc;
        }
        __syncthreads();
    }
}

// 1 / d for d > 0 from the f32 reciprocal and two Newton steps (to ~1 ulp of the double quotient): the
// IEEE double division is a slow-path call, and Sinkhorn runs 39 of them back to back.
__device__ __forceinline__ double recip_d(double d) {
    double r = double(__frcp_rn(float(d)));
    r = r * fma(-d, r, 2.0);
    return r * fma(-d, r, 2.0);
}

// comb for hc = 4 on one warp: lane l < 16 owns element (l / 4, l % 4) in a register; row sums over lanes
// xor 1, 2 and column sums over xor 4, 8, so an iteration is two shuffles and one reciprocal (lanes 16..31
// mirror the work on garbage and are not written).
__device__ __forceinline__ void comb_sinkhorn4(const MhcParams& p, int64_t t, double inv, double scale,
                                               const double* logits) {
    const int lane = threadIdx.x & 31, e = lane & 15;
    double x = inv * logits[e] * scale + double(p.base[2 * 4 + e]);
    double mx = fmax(x, __shfl_xor_sync(0xffffffffu, x, 1));
    mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    x = exp(x - mx);
    double sum = x + __shfl_xor_sync(0xffffffffu, x, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    x = x / sum + p.hc_eps;
    for (int it = 0; it < 2 * p.sinkhorn_iters - 1; ++it) {
        const int o = (it % 2) == 0 ? 4 : 1;  // columns first, then rows / columns alternate
        double s = x + __shfl_xor_sync(0xffffffffu, x, o);
        s += __shfl_xor_sync(0xffffffffu, s, 2 * o);
        x *= recip_d(s + p.hc_eps);
    }
    if (lane < 16) p.comb[t * p.ld_comb + e] = float(x);
}

// comb for any hc <= 8 on one warp, the matrix in shared memory C: each lane divides its own elements.
__device__ __forceinline__ void comb_sinkhorn_any(const MhcParams& p, int64_t t, double inv, double scale,
                                                  const double* logits, const double* base_comb, double* C) {
    const int hc = int(p.hc), hh = hc * hc, lane = threadIdx.x & 31;
    if (lane < hc) {  // row softmax of the comb logits, + eps: lane j owns row j
        double mx = -INFINITY, sum = 0;
        for (int k = 0; k < hc; ++k) {
            C[lane * hc + k] = inv * logits[lane * hc + k] * scale + base_comb[k];
            mx = fmax(mx, C[lane * hc + k]);
        }
        for (int k = 0; k < hc; ++k) sum += (C[lane * hc + k] = exp(C[lane * hc + k] - mx));
        for (int k = 0; k < hc; ++k) C[lane * hc + k] = C[lane * hc + k] / sum + p.hc_eps;
    }
    __syncwarp();
    for (int it = 0; it < 2 * p.sinkhorn_iters - 1; ++it) {
        const bool cols = (it % 2) == 0;
        double sums[2];
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const int e = lane + 32 * q, r = e / hc, c = e % hc;
            double s = 0;
            if (e < hh)
                for (int b = 0; b < hc; ++b) s += cols ? C[b * hc + c] : C[r * hc + b];
            sums[q] = s;
        }
        __syncwarp();
#pragma unroll
        for (int q = 0; q < 2; ++q)
            if (lane + 32 * q < hh) C[lane + 32 * q] /= (sums[q] + p.hc_eps);
        __syncwarp();
    }
    for (int e = lane; e < hh; e += 32) p.comb[t * p.ld_comb + e] = float(C[e]);
}

constexpr int kFinishThreads = 512;  // warp 0 runs Sinkhorn, 15 warps collapse (7 took ~5 rounds of loads)
constexpr int kRegCols = 9;          // columns per collapse thread held in registers (hc = 4, D <= 4320)

// The norm's 1 / rms of x from each collapse thread's sum of squares (warp 0 has left): warp sums, then the
// collapse warps in order on a named barrier.
__device__ __forceinline__ float collapse_norm_inv(double ss, int64_t D, float eps, double* norm_red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    ss = warp_sum_d(ss);
    if (lane == 0) norm_red[warp - 1] = ss;
    asm volatile("bar.sync 1, %0;" ::"r"(int(blockDim.x) - 32) : "memory");
    double tot = 0;
    for (int w = 0; w < int(blockDim.x >> 5) - 1; ++w) tot += norm_red[w];
    return float(1.0 / sqrt(tot / double(D) + double(eps)));
}

// Columns c = threadIdx.x - 32 + i (blockDim.x - 32) of the token's four streams, and the norm's weights.
template <class S>
__device__ __forceinline__ void preload_regs(const MhcParams& p, const NormOut& norm, const S* v,
                                             float (&sv)[kRegCols][4], float (&wv)[kRegCols]) {
    const int64_t c0 = threadIdx.x - 32, stride = blockDim.x - 32;
#pragma unroll
    for (int i = 0; i < kRegCols; ++i) {
        const int64_t c = c0 + i * stride;
#pragma unroll
        for (int k = 0; k < 4; ++k) sv[i][k] = c < p.D ? hc::ldg1(v + k * p.D + c) : 0.0f;
    }
    if (norm.y == nullptr || norm.w == nullptr) {  // one loop per weight dtype (no branch per load)
#pragma unroll
        for (int i = 0; i < kRegCols; ++i) wv[i] = 1.0f;
    } else if (norm.wdt == Fdt::kBF16) {
#pragma unroll
        for (int i = 0; i < kRegCols; ++i) {
            const int64_t c = c0 + i * stride;
            wv[i] = c < p.D ? __bfloat162float(static_cast<const __nv_bfloat16*>(norm.w)[c]) : 1.0f;
        }
    } else {
#pragma unroll
        for (int i = 0; i < kRegCols; ++i) {
            const int64_t c = c0 + i * stride;
            wv[i] = c < p.D ? load_f(norm.w, norm.wdt, c) : 1.0f;
        }
    }
}

// The collapse (and norm) of the preloaded columns: the same sums in the same order as the loop in
// mhc_split_finish_kernel, so the same bits.
__device__ __forceinline__ void collapse_regs(const MhcParams& p, const NormOut& norm, int64_t t,
                                              const double (&pr)[kMaxHc], const float (&sv)[kRegCols][4],
                                              const float (&wv)[kRegCols], double* norm_red) {
    const int64_t c0 = threadIdx.x - 32, stride = blockDim.x - 32;
    float xs[kRegCols];
    double ss = 0;
#pragma unroll
    for (int i = 0; i < kRegCols; ++i) {
        const int64_t c = c0 + i * stride;
        double acc = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) acc += pr[k] * double(sv[i][k]);
        xs[i] = float(acc);
        if (c < p.D) {
            p.x[t * p.ld_x + c] = xs[i];
            ss += double(xs[i]) * xs[i];
        }
    }
    if (norm.y == nullptr) return;
    const float ninv = collapse_norm_inv(ss, p.D, norm.eps, norm_red);
#pragma unroll
    for (int i = 0; i < kRegCols; ++i) {
        const int64_t c = c0 + i * stride;
        if (c < p.D) norm.y[t * norm.ld_y + c] = xs[i] * ninv * wv[i];
    }
}

// One block per token: the partials in split order, then pre / post / comb and the collapse; with norm.y,
// the collapse warps then norm x (mhc_pre_norm, hc_head_norm).
template <class S>
__global__ void __launch_bounds__(kFinishThreads)
    mhc_split_finish_kernel(MhcParams p, int M, int64_t splits, const double* part, NormOut norm) {
    allow_early_next();
    __shared__ double mix[kMaxMix + 1];
    __shared__ double norm_red[kFinishThreads / 32];
    __shared__ double C[kMaxHc * kMaxHc];
    __shared__ float pre[kMaxHc];
    const int64_t t = blockIdx.x, width = p.hc * p.D;
    const int hc = int(p.hc), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // warp 0's table values first, before any store: later loads could not move above the stores
    double base_pre = 0, base_post = 0, base_comb[kMaxHc] = {}, sc[3] = {};
    if (threadIdx.x < 32) {
        sc[0] = p.scale[0];
        if (!p.head) sc[1] = p.scale[1], sc[2] = p.scale[2];
        if (lane < hc) {
            base_pre = p.base[lane];
            if (!p.head) {
                base_post = p.base[hc + lane];
#pragma unroll
                for (int k = 0; k < kMaxHc; ++k)
                    if (k < hc) base_comb[k] = p.base[2 * hc + lane * hc + k];
            }
        }
    }
    // hc = 4: each collapse thread's stream values and norm weights are loaded now, their latency hidden
    // behind the partial sums and Sinkhorn
    const S* v = static_cast<const S*>(p.streams) + t * width;
    const bool regs = hc == 4 && p.D <= int64_t(kRegCols) * (blockDim.x - 32);
    float sv[kRegCols][4], wv[kRegCols];
    if (regs && threadIdx.x >= 32) preload_regs(p, norm, v, sv, wv);
    // a warp per four values, lanes striding the splits, all loads of a pass issued together
    for (int m0 = warp; m0 <= M; m0 += 4 * (blockDim.x >> 5)) {
        double acc[4] = {0, 0, 0, 0};
        for (int64_t sp = lane; sp < splits; sp += 32)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int m = m0 + j * int(blockDim.x >> 5);
                if (m <= M) acc[j] += part[(t * splits + sp) * (M + 1) + m];
            }
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[j] = warp_sum_d(acc[j]);
        if (lane == 0)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int m = m0 + j * int(blockDim.x >> 5);
                if (m <= M) mix[m] = acc[j];
            }
    }
    __syncthreads();
    const double inv = mix_inv(mix[0], width, p.norm_eps);
    if (threadIdx.x < hc) pre[lane] = pre_weight(inv, mix[1 + lane], sc[0], base_pre, p.hc_eps);
    __syncthreads();
    if (warp == 0) {  // post and comb, while the other warps collapse
        if (!p.head) {
            if (lane < hc)
                p.post[t * p.ld_post + lane] = post_weight(inv, mix[1 + hc + lane], sc[1], base_post);
            if (hc == 4)
                comb_sinkhorn4(p, t, inv, sc[2], mix + 1 + 2 * hc);
            else
                comb_sinkhorn_any(p, t, inv, sc[2], mix + 1 + 2 * hc, base_comb, C);
        }
        return;
    }
    double pr[kMaxHc];
#pragma unroll
    for (int i = 0; i < kMaxHc; ++i) pr[i] = i < hc ? double(pre[i]) : 0.0;
    if (regs) return collapse_regs(p, norm, t, pr, sv, wv, norm_red);
    double ss = 0;
#pragma unroll 4
    for (int64_t c = threadIdx.x - 32; c < p.D;
         c += blockDim.x - 32) {  // read-only loads run ahead of stores
        double acc = 0;
#pragma unroll
        for (int i = 0; i < kMaxHc; ++i)
            if (i < hc) acc += pr[i] * double(hc::ldg1(v + i * p.D + c));
        const float xv = float(acc);
        p.x[t * p.ld_x + c] = xv;
        ss += double(xv) * xv;
    }
    if (norm.y == nullptr) return;
    const float ninv = collapse_norm_inv(ss, p.D, norm.eps, norm_red);
    for (int64_t c = threadIdx.x - 32; c < p.D; c += blockDim.x - 32)  // each thread re-reads its own x
        norm.y[t * norm.ld_y + c] =
            p.x[t * p.ld_x + c] * ninv * (norm.w != nullptr ? load_f(norm.w, norm.wdt, c) : 1.0f);
}

// A prefill's finish (the FP64 tensor cores' partials, hc = 4) in two launches: the finish kernel holds a
// token a block at 512 threads and ~123 registers, one block an SM, so each SM waits out ~30 tokens' Sinkhorn
// chains in a row (~290 us a call at 4,096 tokens where the bytes take ~100). Here a warp a token adds the
// splits' partials in split order and computes pre / post / comb (the finish kernel's expressions), then a
// block a token collapses and norms at the bandwidth.
constexpr int kCoefWarps = 4;
__global__ void __launch_bounds__(32 * kCoefWarps)
    mhc_coef_kernel(MhcParams p, int M, int64_t splits, const double* part, float* pre_out) {
    allow_early_next();
    __shared__ double mixes[kCoefWarps][kMaxMix + 1];
    const int64_t t = int64_t(blockIdx.x) * kCoefWarps + (threadIdx.x >> 5);
    if (t >= p.n) return;
    const int lane = threadIdx.x & 31;
    double* mix = mixes[threadIdx.x >> 5];
    for (int m = lane; m <= M; m += 32) {  // the splits' partials in split order
        double acc = 0;
        for (int64_t sp = 0; sp < splits; ++sp) acc += part[(t * splits + sp) * (M + 1) + m];
        mix[m] = acc;
    }
    __syncwarp();
    const double inv = mix_inv(mix[0], 4 * p.D, p.norm_eps);
    if (lane < 4) {
        pre_out[t * 4 + lane] = pre_weight(inv, mix[1 + lane], p.scale[0], p.base[lane], p.hc_eps);
        if (!p.head)
            p.post[t * p.ld_post + lane] = post_weight(inv, mix[5 + lane], p.scale[1], p.base[4 + lane]);
    }
    if (!p.head) comb_sinkhorn4(p, t, inv, double(p.scale[2]), mix + 9);
}

// x = sum_k pre_k stream_k (the finish kernel's sums), then with norm.y its rms_norm; 16 columns a thread
// (four float4s of each stream, all loaded before the first store).
template <class S>
__global__ void __launch_bounds__(512) mhc_collapse_kernel(MhcParams p, const float* pre_in, NormOut norm) {
    allow_early_next();
    __shared__ double red[32];
    const int64_t t = blockIdx.x;
    const S* v = static_cast<const S*>(p.streams) + t * 4 * p.D;
    double pr[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) pr[k] = double(pre_in[t * 4 + k]);
    float4 sv[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t c = 4 * (threadIdx.x + int64_t(i) * blockDim.x);
#pragma unroll
        for (int k = 0; k < 4; ++k) sv[i][k] = c < p.D ? hc::ldg4(v + k * p.D + c) : make_float4(0, 0, 0, 0);
    }
    float xs[4][4];
    double ss = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t c = 4 * (threadIdx.x + int64_t(i) * blockDim.x);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            double acc = 0;
#pragma unroll
            for (int k = 0; k < 4; ++k) acc += pr[k] * double((&sv[i][k].x)[e]);
            xs[i][e] = float(acc);
            ss += double(xs[i][e]) * xs[i][e];
        }
        if (c < p.D)
            *reinterpret_cast<float4*>(p.x + t * p.ld_x + c) =
                make_float4(xs[i][0], xs[i][1], xs[i][2], xs[i][3]);
    }
    if (norm.y == nullptr) return;
    ss = block_sum_d(ss, red);
    const float ninv = float(1.0 / sqrt(ss / double(p.D) + double(norm.eps)));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t c = 4 * (threadIdx.x + int64_t(i) * blockDim.x);
        if (c >= p.D) continue;
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
            o[e] = xs[i][e] * ninv * (norm.w != nullptr ? load_f(norm.w, norm.wdt, c + e) : 1.0f);
        *reinterpret_cast<float4*>(norm.y + t * norm.ld_y + c) = make_float4(o[0], o[1], o[2], o[3]);
    }
}

bool collapse_ok(const MhcParams& p, const NormOut& norm) {
    const auto al = [](const void* q, int64_t ld) {
        return reinterpret_cast<uintptr_t>(q) % 16 == 0 && ld % 4 == 0;
    };
    return p.hc == 4 && p.D % 4 == 0 && p.D <= 16 * 512 && al(p.streams, p.D) && al(p.x, p.ld_x) &&
           (norm.y == nullptr || al(norm.y, norm.ld_y));
}

}  // namespace

int mhc_max_hc() { return kMaxHc; }

bool mhc_split_supported(const MhcParams& p) {
    return (p.hc * p.D) % 4 == 0 && p.ld_fn % 4 == 0 && reinterpret_cast<uintptr_t>(p.streams) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(p.fn) % 16 == 0;
}

namespace {
void launch_split(const MhcParams& p, const NormOut& norm, Scratch& scratch, Stream s) {
    const int M = int(p.head ? p.hc : (2 + p.hc) * p.hc);
    const bool dmma =
        p.n >= kMhcDmmaMinTokens && mhc_mix_dmma_supported(p, M);  // a prefill: FP64 tensor cores
    const int64_t splits = dmma ? mhc_mix_dmma_splits(p) : (p.hc * p.D + kSplitCols - 1) / kSplitCols;
    const bool two_step = dmma && collapse_ok(p, norm);  // pre [n, 4] after the partials
    const size_t part_bytes = size_t(p.n * splits * (M + 1)) * sizeof(double);
    auto* part =
        static_cast<double*>(scratch.get(3, part_bytes + (two_step ? size_t(p.n) * 4 * sizeof(float) : 0)));
    if (dmma) {
        if (p.tf32)
            launch_mhc_mix_tf32(p, M, part, s);
        else
            launch_mhc_mix_dmma(p, M, part, s);
        if (two_step) {
            float* pre = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(part) + part_bytes);
            mhc_coef_kernel<<<blocks_for(p.n, kCoefWarps), 32 * kCoefWarps, 0, as_stream(s)>>>(p, M, splits,
                                                                                               part, pre);
            const unsigned threads = unsigned((p.D / 16 + 31) / 32 * 32);
            hc::by_stream_type(p.bf16, [&](auto tag) {
                mhc_collapse_kernel<typename decltype(tag)::type>
                    <<<unsigned(p.n), threads, 0, as_stream(s)>>>(p, pre, norm);
            });
            return;
        }
    } else {
        // a prefill's blocks take more tokens each: the fn rows they hold in registers are loaded once a
        // block
        const int tokens = p.n >= 2048 ? 4 * kSplitTokens : kSplitTokens;
        const dim3 grid(unsigned(splits), blocks_for(p.n, tokens));
        hc::by_stream_type(p.bf16, [&](auto tag) {
            using S = typename decltype(tag)::type;
            if (M > 8)
                mhc_split_kernel<24, S><<<grid, kSplitThreads, 0, as_stream(s)>>>(p, M, tokens, part);
            else
                mhc_split_kernel<8, S><<<grid, kSplitThreads, 0, as_stream(s)>>>(p, M, tokens, part);
        });
    }
    hc::by_stream_type(p.bf16, [&](auto tag) {
        mhc_split_finish_kernel<typename decltype(tag)::type>
            <<<unsigned(p.n), kFinishThreads, 0, as_stream(s)>>>(p, M, splits, part, norm);
    });
}
}  // namespace

void launch_mhc_pre_norm(const MhcParams& p, const NormOut& norm, Scratch& scratch, Stream s) {
    if (p.n > 0) launch_split(p, norm, scratch, s);
}

void launch_mhc_pre(const MhcParams& p, Scratch& scratch, Stream s, MhcVariant v) {
    if (p.n == 0) return;
    const int M = int(p.head ? p.hc : (2 + p.hc) * p.hc);
    if (v == MhcVariant::kSplitK) return launch_split(p, NormOut{}, scratch, s);
    double* mix = static_cast<double*>(scratch.get(3, size_t(p.n * M) * sizeof(double)));
    hc::by_stream_type(p.bf16, [&](auto tag) {
        using S = typename decltype(tag)::type;
        mhc_mix_kernel<S><<<dim3(unsigned(M), unsigned(p.n)), 256, 0, as_stream(s)>>>(p, mix);
        mhc_finish_kernel<S><<<unsigned(p.n), 256, 0, as_stream(s)>>>(p, mix);
    });
}

}  // namespace di::cuda
