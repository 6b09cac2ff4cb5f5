// Prefill attention on the tensor cores (variant `mma`): head_dim 512, heads in groups of 16.
// Block = (query t, 16 heads), 8 warps; warp w owns head_dim columns [64 w, 64 w + 64) of q (for the scores)
// and of the output. Keys come in tiles of 32 (window, then causal entries or the deduplicated picks, in the
// per_query kernel's order), as hi + lo f16 in shared memory with one power-of-two scale per tile; q as hi +
// lo f16 in registers with one scale per block. Per tile:
//   scores:  each warp's 64-column slice of q . k on mma.sync m16n8k16 (hi.hi + hi.lo + lo.hi: 22-bit
//            operands, products exact, f32 sums), the 8 slices summed in warp order through shared memory;
//   softmax: online, from the sink (m = sink, l = 1) as per_query, in f32;
//   output:  p (times 2^14, as hi + lo f16: the score fragments are the A fragments) times the tile's keys
//            (ldmatrix.trans), into f32 accumulators kept in the current tile's scale.
// AttentionParams::f16 (native precision): the hi halves alone, one product each (q, keys and p rounded to
// f16). Every sum runs in a fixed order: deterministic; a query's result does not depend on the other
// queries.
#include <algorithm>

#include "ops/cuda/attention_keys.cuh"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/smem_limit.h"

namespace di::cuda {
namespace {

using mma::block_max;
using mma::chunk_shift;
using mma::ldsm_x4_trans;
using mma::mma16816;
using mma::pow2f;

constexpr int kHd = 512, kHeads = 16, kWarps = 8, kSlice = kHd / kWarps, kKeys = 32;
constexpr int kRow = kHd + 8;  // halves per staged key row: conflict-free fragment loads

__device__ __forceinline__ uint32_t pack2(__half lo, __half hi) {
    return uint32_t(__half_as_ushort(lo)) | (uint32_t(__half_as_ushort(hi)) << 16);
}
// x as hi + lo f16 (x already scaled into f16 range).
__device__ __forceinline__ void split_pair(float x, float y, uint32_t& hi, uint32_t& lo) {
    const __half hx = __float2half_rn(x), hy = __float2half_rn(y);
    hi = pack2(hx, hy);
    lo = pack2(__float2half_rn(x - __half2float(hx)), __float2half_rn(y - __half2float(hy)));
}

// kLo: hi + lo operands (exact precision); else hi only (AttentionParams::f16, the native precision).
template <bool kLo>
__global__ void __launch_bounds__(32 * kWarps, 2) attention_mma_kernel(AttentionParams p) {
    allow_early_next();
    extern __shared__ __align__(16) unsigned char smem[];
    __half* kh = reinterpret_cast<__half*>(smem);              // [kKeys][kRow] hi
    __half* kl = kh + kKeys * kRow;                            // [kKeys][kRow] lo
    float* sp = reinterpret_cast<float*>(kl + kKeys * kRow);   // [kWarps][kHeads][kKeys] partial scores
    float* sf = sp + kWarps * kHeads * kKeys;                  // [kHeads][kKeys] scores
    float* red = sf + kHeads * kKeys;                          // [kWarps]
    int32_t* list = reinterpret_cast<int32_t*>(red + kWarps);  // [2k] picks, then keep flags
    const int64_t t = blockIdx.x, h0 = int64_t(blockIdx.y) * kHeads;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int d0 = warp * kSlice;

    const QueryKeys keys = query_keys(p, t, list);
    const int64_t lo = keys.lo, n_win = keys.n_win, n_comp = keys.n_comp;
    const int64_t n_keys = n_win + n_comp;

    // q's A fragments of this warp's slice: k-step kk, register r = rows g (+8 for odd r), columns 2q (+8
    // for r >= 2)
    float2 qv[4][4];
    float qmax = 0.0f;
    const float* qb = p.q + t * p.q_s0 + h0 * p.q_s1 + d0;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            qv[kk][r] = *reinterpret_cast<const float2*>(qb + (g + (r & 1) * 8) * p.q_s1 + 16 * kk + 2 * q +
                                                         (r >> 1) * 8);
            qmax = fmaxf(qmax, fmaxf(fabsf(qv[kk][r].x), fabsf(qv[kk][r].y)));
        }
    const int shq = chunk_shift(block_max<kWarps>(qmax, red));
    uint32_t qa[2][4][4];  // [hi, lo][kk][r]
    {
        const float s = pow2f(shq);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                split_pair(qv[kk][r].x * s, qv[kk][r].y * s, qa[0][kk][r], qa[1][kk][r]);
    }

    float o[8][4];  // output columns d0 + 8 n + 2q (+1): rows g (0, 1) and g + 8 (2, 3)
#pragma unroll
    for (int n = 0; n < 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {p.sinks[h0 + g], p.sinks[h0 + g + 8]}, l[2] = {1.0f, 1.0f};
    int sh_prev = 0, sh_guess = 10;
    // thread's share of a tile: keys (tid / 128) + 2 u, columns 4 (tid % 128) .. + 3
    const int r0 = int(threadIdx.x) >> 7, c4 = int(threadIdx.x) & 127;

    for (int64_t j0 = 0; j0 < n_keys; j0 += kKeys) {
        // the tile as hi + lo with the scale 2^sh: guessed from the last tile, redone if the tile's max lies
        // outside [2^10, 2^15) after scaling (the hi part then keeps >= 10 bits of the max)
        auto stage = [&](int sh) {
            const float s = pow2f(sh);
            float km = 0.0f;
#pragma unroll 4
            for (int u = 0; u < kKeys / 2; ++u) {
                const int r = r0 + 2 * u;
                float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
                if (j0 + r < n_keys)
                    v = __ldg(reinterpret_cast<const float4*>(key_row(p, j0 + r, lo, n_win, list)) + c4);
                km = fmaxf(km, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
                uint2 hi, lw;
                split_pair(v.x * s, v.y * s, hi.x, lw.x);
                split_pair(v.z * s, v.w * s, hi.y, lw.y);
                *reinterpret_cast<uint2*>(kh + r * kRow + 4 * c4) = hi;
                if (kLo) *reinterpret_cast<uint2*>(kl + r * kRow + 4 * c4) = lw;
            }
            return km;
        };
        __syncthreads();  // the previous tile's readers are done
        const float km = block_max<kWarps>(stage(sh_guess), red);
        int sht = sh_guess;
        const float scaled = km * pow2f(sh_guess);
        if (km > 0.0f && km <= 3.4e38f && !(scaled >= 1024.0f && scaled < 32768.0f)) {
            sht = chunk_shift(km);
            __syncthreads();
            stage(sht);
        }
        sh_guess = sht;
        if (j0 == 0) sh_prev = sht;  // the accumulators are still zero
        __syncthreads();

        float s[4][4];  // scores of keys j0 + 8 nt + 2q (+1): rows g (0, 1), g + 8 (2, 3)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const int at = (nt * 8 + g) * kRow + d0 + 16 * kk + 2 * q;
                const uint32_t bh0 = *reinterpret_cast<const uint32_t*>(kh + at),
                               bh1 = *reinterpret_cast<const uint32_t*>(kh + at + 8);
                mma16816(s[nt], qa[0][kk], bh0, bh1);
                if (kLo) {
                    const uint32_t bl0 = *reinterpret_cast<const uint32_t*>(kl + at),
                                   bl1 = *reinterpret_cast<const uint32_t*>(kl + at + 8);
                    mma16816(s[nt], qa[0][kk], bl0, bl1);
                    mma16816(s[nt], qa[1][kk], bh0, bh1);
                }
            }
        float* mine = sp + warp * kHeads * kKeys;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            *reinterpret_cast<float2*>(mine + g * kKeys + nt * 8 + 2 * q) = make_float2(s[nt][0], s[nt][1]);
            *reinterpret_cast<float2*>(mine + (g + 8) * kKeys + nt * 8 + 2 * q) =
                make_float2(s[nt][2], s[nt][3]);
        }
        __syncthreads();
        {  // the slices' sum in warp order: 2 of the 512 scores per thread
            const int e = 2 * int(threadIdx.x);
            float2 acc = *reinterpret_cast<const float2*>(sp + e);
#pragma unroll
            for (int w = 1; w < kWarps; ++w) {
                const float2 v = *reinterpret_cast<const float2*>(sp + w * kHeads * kKeys + e);
                acc.x += v.x, acc.y += v.y;
            }
            *reinterpret_cast<float2*>(sf + e) = acc;
        }
        __syncthreads();

        const float zs = scalbnf(p.scale, -(shq + sht));
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int key = nt * 8 + 2 * q + (v & 1), row = g + (v >> 1) * 8;
                s[nt][v] = j0 + key < n_keys ? sf[row * kKeys + key] * zs : -INFINITY;
            }
        float f[2];
        online_softmax_tile(s, m, l, f);
#pragma unroll
        for (int i = 0; i < 2; ++i)
            f[i] = scalbnf(f[i], sht - sh_prev);  // the accumulators move to this tile's key scale
        sh_prev = sht;
#pragma unroll
        for (int n = 0; n < 8; ++n) o[n][0] *= f[0], o[n][1] *= f[0], o[n][2] *= f[1], o[n][3] *= f[1];

#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {  // keys 16 ks .. + 15: score tiles 2 ks and 2 ks + 1
            uint32_t ah[4], al[4];
            const float s14 = 16384.0f;
            split_pair(s[2 * ks][0] * s14, s[2 * ks][1] * s14, ah[0], al[0]);
            split_pair(s[2 * ks][2] * s14, s[2 * ks][3] * s14, ah[1], al[1]);
            split_pair(s[2 * ks + 1][0] * s14, s[2 * ks + 1][1] * s14, ah[2], al[2]);
            split_pair(s[2 * ks + 1][2] * s14, s[2 * ks + 1][3] * s14, ah[3], al[3]);
            // ldmatrix rows: matrix lane / 8 = keys + 8 (odd) and columns + 8 (>= 2)
            const int at = (16 * ks + ((lane >> 3) & 1) * 8 + (lane & 7)) * kRow + d0 + (lane >> 4) * 8;
#pragma unroll
            for (int n = 0; n < 8; n += 2) {
                uint32_t bh[4];
                ldsm_x4_trans(bh, kh + at + 8 * n);
                mma16816(o[n], ah, bh[0], bh[1]);
                mma16816(o[n + 1], ah, bh[2], bh[3]);
                if (kLo) {
                    uint32_t bl[4];
                    ldsm_x4_trans(bl, kl + at + 8 * n);
                    mma16816(o[n], ah, bl[0], bl[1]);
                    mma16816(o[n + 1], ah, bl[2], bl[3]);
                    mma16816(o[n], al, bh[0], bh[1]);
                    mma16816(o[n + 1], al, bh[2], bh[3]);
                }
            }
        }
    }
    const float out_scale = scalbnf(1.0f, -(14 + sh_prev));
    const float inv[2] = {out_scale / l[0], out_scale / l[1]};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float* dst = p.out + t * p.o_s0 + (h0 + g + 8 * i) * p.o_s1 + d0 + 2 * q;
#pragma unroll
        for (int n = 0; n < 8; ++n)
            *reinterpret_cast<float2*>(dst + 8 * n) =
                make_float2(o[n][2 * i] * inv[i], o[n][2 * i + 1] * inv[i]);
    }
}

size_t smem_bytes(const AttentionParams& p) {
    return size_t(2 * kKeys * kRow) * sizeof(__half) +
           size_t(kWarps * kHeads * kKeys + kHeads * kKeys + kWarps) * 4 +
           size_t(p.comp_mask == AttnCompMask::kPicks ? 2 * p.k : 0) * sizeof(int32_t);
}

}  // namespace

bool attention_mma_supported(const AttentionParams& p) {
    auto aligned = [](const void* ptr, int64_t ld) {
        return ptr == nullptr || (reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && ld % 4 == 0);
    };
    return p.hd == kHd && p.H % kHeads == 0 && reinterpret_cast<uintptr_t>(p.q) % 8 == 0 && p.q_s0 % 2 == 0 &&
           p.q_s1 % 2 == 0 && reinterpret_cast<uintptr_t>(p.out) % 8 == 0 && p.o_s0 % 2 == 0 &&
           p.o_s1 % 2 == 0 && aligned(p.ring, p.ld_ring) && aligned(p.kv, p.ld_kv) &&
           aligned(p.comp, p.ld_comp) && smem_bytes(p) <= 200 * 1024;
}

void launch_attention_mma(const AttentionParams& p, Stream s) {
    if (p.L == 0) return;
    const size_t smem = smem_bytes(p);
    raise_dynamic_smem(attention_mma_kernel<true>, smem);
    raise_dynamic_smem(attention_mma_kernel<false>, smem);
    const dim3 grid(unsigned(p.L), unsigned(p.H / kHeads));
    if (p.f16)
        attention_mma_kernel<false><<<grid, 32 * kWarps, smem, as_stream(s)>>>(p);
    else
        attention_mma_kernel<true><<<grid, 32 * kWarps, smem, as_stream(s)>>>(p);
}

}  // namespace di::cuda
