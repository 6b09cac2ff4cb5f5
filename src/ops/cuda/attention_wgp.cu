// Prefill attention of the native precision on the warpgroup tensor cores with a producer and two consumers
// (set_attention_wgmma(2), the default): attention_wg.cu's queries and numerics (f16 q with one power-of-two
// scale, the f16 key rows with their own shifts, f32 sums), without its duplicated scores and with the copies
// taken out of the multiplying warps. Block (query t, 64 heads), three warpgroups:
//   producer (warpgroup 2): copies 64-key tiles and their shifts into two buffers (cp.async, completing on an
//            mbarrier a buffer), tile 2i into buffer 0 and 2i + 1 into buffer 1, each once both consumers
//            freed it
//   consumer c (warpgroups 0, 1): the scores of tile 2i + c (wgmma m64n64k16, q and the tile in shared
//            memory), and head_dim columns 256 c .. + 255 of the output for both tiles of the pair (wgmma
//            m64n256k16: its own tile's probabilities from registers, the other's from shared memory)
// Per pair, the running max and the accumulators' scale pass from consumer 0 to 1 and back (named barriers):
// consumer 0 takes tile 2i with the max and scale of the pair before, consumer 1 tile 2i + 1 with consumer
// 0's; consumer 0 then rescales its probabilities to consumer 1's and publishes them, consumer 1 publishes
// its own as they are. So each tile's probabilities meet both halves of the output at one max and one scale,
// the softmax of tiles taken in order. The softmax sums: consumer 0 holds the sink's and its tiles', consumer
// 1 its tiles', added at the end. A last pair whose second tile has no keys (HCA layers at short contexts:
// 160 keys, three tiles): consumer 1 skips that tile's scores and consumer 0 its products (both zeros);
// consumer 1's own products of its zero probabilities stay (skipping them made ptxas serialise the wgmmas,
// C7515). The softmax runs in base 2 (scores times log2 e, one ex2 a score). Not bit-identical to
// attention_wg (the rescaling order and the exponentials differ); its tests compare with the reference at the
// native tolerance.
// The layer's tail (AttentionParams::qp_pos, rope_pos; Backend::attentions_stored): the queries normed and
// rotated where they are loaded (no pass of their own over q, 1 GB a V4-Flash layer at 4,096 tokens) and the
// output rotated where it is stored, each with rms_norm_rope's and rope's products.
#include <algorithm>
#include <cstdint>

#include "ops/cuda/attention_f16_rows.cuh"
#include "ops/cuda/attention_keys.cuh"
#include "ops/cuda/attention_wg_tiles.cuh"
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/env_switch.h"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {
namespace {

using namespace mma;
using wgtile::kChunkBytes, wgtile::kTileBytes, wgtile::unit_at;

constexpr int kHeads = 64, kKeys = 64, kThreads = 384;
constexpr int kConsumerRegs = 224, kProducerRegs = 56;  // 2 x 128 x 224 + 128 x 56 <= 65,536
constexpr uint32_t kPBytes = kChunkBytes;               // 64 heads x 64 keys of probabilities
// named barriers (0 is __syncthreads'): the consumers' q max and q stores, the pair's handoffs, the sums
enum : int { kBarQMax = 1, kBarQ, kBarMax0, kBarMax1, kBarP0, kBarP1, kBarSums, kBarQInv };

// A probability's exponent: 2^14 times 2^(t - shift), never above 2^14 for a key of the tile (t is at most
// its smallest shift) and clamped for the zero shifts of slots past the last key (their probability is 0).
__device__ __forceinline__ int p_exp(int t, int shift) { return min(max(14 + t - shift, -126), 14); }

// The accumulators' rows times f (heads g, g + 8), skipped where the whole warp's factors are 1 (the usual
// case once a query's max and the keys' scale have settled).
__device__ __forceinline__ void rescale(float (&o)[128], const float (&f)[2]) {
    if (__all_sync(0xffffffffu, f[0] == 1.0f && f[1] == 1.0f)) return;
#pragma unroll
    for (int j = 0; j < 32; ++j)
        o[4 * j] *= f[0], o[4 * j + 1] *= f[0], o[4 * j + 2] *= f[1], o[4 * j + 3] *= f[1];
}

struct Layout {  // byte offsets from the 1024-byte aligned base
    static constexpr uint32_t q = 0, k = kTileBytes, p = 3 * kTileBytes, shifts = p + 2 * kPBytes,
                              max = shifts + 2 * kKeys * 4, scale = max + 2 * kHeads * 4, sums = scale + 16,
                              red = sums + 2 * kHeads * 4, bars = red + 8 * 4,
                              rope = bars + 4 * 8,  // [2][kAttentionTailMaxHalf] RopeCs: q's, the output's
        list = rope + 2 * kAttentionTailMaxHalf * 8;
    // the queries' sums of squares (q_tile_prepared: 8 warps x 16 rows of doubles) and the rows' scales (64
    // floats) before the first tile, in the probabilities' buffers, which the consumers first write after q's
    // barrier
    static constexpr uint32_t q_sums = p, q_inv = p + 8 * 16 * 8;
};

// q_tile_f16 with the queries prepared on the way (p.qp_pos): each head row normed as the unweighted rms_norm
// (the sum of squares in double, in a fixed order) and rotated as rope (cs: the pairs' factors), with
// rms_norm_rope's products, then times 2^shq, shq chunk_shift of the rows' bound sqrt(hd) * |qp_mscale| (a
// normed row's values are at most sqrt(hd) in size and a rotation keeps a pair's length), so no pass for the
// max. A power of two: the f16 values q_tile_f16 gives the prepared rows, but for values it would keep above
// f16's smallest normal that fall below it here (smaller than the bound by over 2^29). A row's scale (a
// double division and square root) is computed once, by thread `row`, and shared through inv_sh.
__device__ __forceinline__ float q_tile_prepared(const AttentionParams& p, int64_t t, int64_t h0, int i,
                                                 unsigned char* tile, const RopeCs* cs, double* ss_sh,
                                                 float* inv_sh) {
    const int u = i & 63, r0 = i >> 6, lane = i & 31, warp = i >> 5;
    const int64_t at = t * p.q_s0 + h0 * p.q_s1 + u * 8;
    double ss[16];
    float2 qv[16][4];  // the 16 rows' units, kept for the conversion below (no second read of q)
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const int64_t row = at + (r0 + 4 * k) * p.q_s1;
        if (p.qb != nullptr) {  // 8 bf16 values, exact in f32
            const uint4 w = *reinterpret_cast<const uint4*>(p.qb + row);
            const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int e = 0; e < 4; ++e)
                qv[k][e] = make_float2(__uint_as_float(ws[e] << 16), __uint_as_float(ws[e] & 0xffff0000u));
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) qv[k][e] = *reinterpret_cast<const float2*>(p.q + row + 2 * e);
        }
        double acc = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e)
            acc += double(qv[k][e].x) * qv[k][e].x, acc += double(qv[k][e].y) * qv[k][e].y;
        ss[k] = acc;
    }
#pragma unroll
    for (int k = 0; k < 16; ++k) ss[k] = warp_sum_d(ss[k]);
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < 16; ++k) ss_sh[warp * 16 + k] = ss[k];
    }
    wg::named_sync(kBarQMax, 256);
    if (i < 64) {  // row i = r0 + 4 k: warps 2 r0 and 2 r0 + 1 hold its units 0 .. 31, 32 .. 63
        const int r = i & 3, k = i >> 2;
        const double tot = ss_sh[2 * r * 16 + k] + ss_sh[(2 * r + 1) * 16 + k];
        inv_sh[i] = float(1.0 / sqrt(tot / double(p.hd) + double(p.qp_eps)));
    }
    wg::named_sync(kBarQInv, 256);
    const int shq = chunk_shift(sqrtf(float(p.hd)) * fabsf(p.qp_mscale));
    const float s = pow2f(shq);
    const int64_t off = p.hd - 2 * p.qp_half;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const int row = r0 + 4 * k;
        const float inv = inv_sh[row];
        uint32_t w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 v = qv[k][e];
            float a = v.x * inv, b = v.y * inv;
            const int64_t c = u * 8 + 2 * e;
            if (c >= off) {
                const RopeCs f = cs[(c - off) >> 1];
                const float a0 = a;
                a = rope_first(a0, b, f), b = rope_second(a0, b, f);
            }
            w[e] = pack_f16x2(a * s, b * s);
        }
        *reinterpret_cast<uint4*>(tile + unit_at(row, u)) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    return scalbnf(p.scale, -shq);
}

// The output rows as act_quant's e4m3 codes and block scales (p.oq): the values store_out_rows(_rotated)
// stores (rotated where cs is given), each 128-column block's max |v| over the four lanes of a head (two quad
// shuffles), its scale and codes by act_quant.cu's steps, so the bits of act_quant on the stored rows.
// Consumer c holds blocks 2c (j < 16) and 2c + 1 of heads h and h + 8; o is overwritten.
__device__ __forceinline__ void store_out_quantised(const AttentionParams& p, int64_t t, int64_t h, int c,
                                                    int q, float (&o)[128], const float (&inv)[2],
                                                    const RopeCs* cs) {
    const int col0 = 256 * c + 2 * q, off = cs != nullptr ? int(p.hd - 2 * p.rope_half) : int(p.hd);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            float a = o[4 * j + 2 * i] * inv[i], b = o[4 * j + 2 * i + 1] * inv[i];
            if (col0 + 8 * j >= off) {
                const RopeCs f = cs[(col0 + 8 * j - off) >> 1];
                const float a0 = a;
                a = rope_first(a0, b, f), b = rope_second(a0, b, f);
            }
            o[4 * j + 2 * i] = a, o[4 * j + 2 * i + 1] = b;
        }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        uint8_t* const dst = p.oq + t * p.ld_oq + (h + 8 * i) * p.hd + col0;
#pragma unroll
        for (int bb = 0; bb < 2; ++bb) {
            float m = 0.0f;  // fmaxf skips NaN, as act_quant.cu's maximum
#pragma unroll
            for (int j = 16 * bb; j < 16 * bb + 16; ++j)
                m = fmaxf(m, fmaxf(fabsf(o[4 * j + 2 * i]), fabsf(o[4 * j + 2 * i + 1])));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            const float s = act_quant_scale(m);
#pragma unroll
            for (int j = 16 * bb; j < 16 * bb + 16; ++j)
                *reinterpret_cast<uint16_t*>(dst + 8 * j) =
                    act_quant_e4m3x2(o[4 * j + 2 * i], o[4 * j + 2 * i + 1], s);
            if (q == 0) p.osx[((h + 8 * i) * p.hd / 128 + 2 * c + bb) * p.ld_osx + t] = s;
        }
    }
}

// wgtile::store_out_rows with the last 2 * rope_half columns of each head rotated (cs: the pairs' factors)
// after the scale, as rope rotates the stored rows.
__device__ __forceinline__ void store_out_rows_rotated(const AttentionParams& p, int64_t t, int64_t h,
                                                       int col, const float (&o)[128], const float (&inv)[2],
                                                       const RopeCs* cs) {
    const int off = int(p.hd - 2 * p.rope_half);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float* dst = p.out + t * p.o_s0 + (h + 8 * i) * p.o_s1 + col;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            float a = o[4 * j + 2 * i] * inv[i], b = o[4 * j + 2 * i + 1] * inv[i];
            if (col + 8 * j >= off) {
                const RopeCs f = cs[(col + 8 * j - off) >> 1];
                const float a0 = a;
                a = rope_first(a0, b, f), b = rope_second(a0, b, f);
            }
            *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(a, b);
        }
    }
}

size_t smem_bytes(const AttentionParams& p) {
    return 1024 + Layout::list + size_t(p.comp_mask == AttnCompMask::kPicks ? 2 * p.k : 0) * sizeof(int32_t);
}

// Query t and heads h0 .. h0 + 63 of p's call: the body of the call's kernel (a block a query and 64 heads)
// and of the decode batch's (a block a job and 64 heads). t_ahead (>= 0): the query whose rows (these heads)
// the producer prefetches into the L2 before its first copy: the block one wave later, so that its q comes
// from the L2 (a block's q is 128 KB of f32 rows read twice, in the prologue of a block that owns its SM).
__device__ __forceinline__ void wgp_block(const AttentionParams& p, const F16Rows& r, int64_t t, int64_t h0,
                                          int64_t t_ahead = -1) {
    allow_early_next();
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const uint32_t base = (wg::smem_addr(smem_raw) + 1023u) & ~1023u;  // the swizzle's 1024-byte atoms
    unsigned char* const smem = smem_raw + (base - wg::smem_addr(smem_raw));
    int* const shifts = reinterpret_cast<int*>(smem + Layout::shifts);  // [2][kKeys]
    // each consumer's running max and scale for the other: [2][kHeads], [2] (consumer c writes slot c)
    float* const max_sh = reinterpret_cast<float*>(smem + Layout::max);
    int* const scale_sh = reinterpret_cast<int*>(smem + Layout::scale);
    float* const sums = reinterpret_cast<float*>(smem + Layout::sums);  // [2][kHeads]
    float* const red = reinterpret_cast<float*>(smem + Layout::red);
    int32_t* const list = reinterpret_cast<int32_t*>(smem + Layout::list);
    const uint32_t k_ready = base + Layout::bars, k_free = k_ready + 16;  // [2] each
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;

    if (tid == 0) {
        for (int b = 0; b < 2; ++b) wg::mbar_init(k_ready + 8 * b, 128), wg::mbar_init(k_free + 8 * b, 256);
    }
    // the picks' first occurrences found in the key tiles' buffers, which the producer fills after the
    // barrier
    const QueryKeys keys = query_keys(p, t, list, reinterpret_cast<int32_t*>(smem + Layout::k),
                                      2 * kTileBytes / sizeof(int32_t));
    __syncthreads();  // the inits (and the picks)
    const int64_t lo = keys.lo, n_win = keys.n_win, n_keys = n_win + keys.n_comp;
    const int64_t n_pairs = (n_keys + 2 * kKeys - 1) / (2 * kKeys);

    if (warp >= 8) {  // the producer
        wg::setmaxnreg_dec<kProducerRegs>();
        // warp w copies units u = 32 (w & 1) + lane of rows r0 + 2 e (e < 32), each row's place in r.rows
        // found once, by lane e (an f16_row a lane and tile, not one a unit; rows fit 32 bits: 2^31 rows of
        // 1 KB would not fit a GPU); unit_at(row + 8, u) = unit_at(row, u) + 1024
        const int pt = tid - 256, u = 32 * ((pt >> 5) & 1) + lane, r0 = pt >> 6;
        const __half* const src_u = r.rows + u * 8;
        uint32_t dsw[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) dsw[k] = unit_at(r0 + 2 * k, u);
        if (t_ahead >= 0 && t_ahead < p.L && pt < kHeads && h0 + pt < p.H)
            wg::prefetch_l2(p.q + t_ahead * p.q_s0 + (h0 + pt) * p.q_s1, uint32_t(p.hd * 4));
        for (int64_t i = 0; i < n_pairs; ++i) {
            for (int b = 0; b < 2; ++b) {
                wg::mbar_wait(k_free + 8 * b, uint32_t(i & 1) ^ 1u);
                const uint32_t dst = base + Layout::k + uint32_t(b) * kTileBytes;
                const int64_t j0 = (2 * i + b) * kKeys, mine = j0 + r0 + 2 * lane;
                const int my_row = mine < n_keys ? int(f16_row(p, r, mine, lo, n_win, list)) : -1;
#pragma unroll 4
                for (int e = 0; e < 32; ++e) {
                    const int fr = __shfl_sync(0xffffffffu, my_row, e);  // row 0 where past the last key:
                    wg::cp_async16(dst + dsw[e & 3] + 1024u * uint32_t(e >> 2),  // mapped, not read (zeros)
                                   src_u + int64_t(max(fr, 0)) * kKeyRowHalves, fr >= 0);
                }
                if (pt < kKeys) {  // zeros past the last key: the consumers mask those
                    const int64_t j = j0 + pt;
                    const int* src = r.shift;
                    if (j < n_keys) src += f16_row(p, r, j, lo, n_win, list);
                    wg::cp_async4(base + Layout::shifts + uint32_t(b * kKeys + pt) * 4, src, j < n_keys);
                }
                wg::cp_async_arrive_noinc(k_ready + 8 * b);
            }
        }
        return;
    }

    // the consumers
    wg::setmaxnreg_inc<kConsumerRegs>();
    const int c = warp >> 2, hw = 16 * (warp & 3);                      // this consumer, the warp's 16 heads
    RopeCs* const cs = reinterpret_cast<RopeCs*>(smem + Layout::rope);  // q's, then the output's
    if (p.qp_pos != nullptr && tid < p.qp_half)                         // read after q's sums' barrier
        cs[tid] = rope_cs(float(p.qp_pos[t]) * p.qp_inv_freq[tid], p.qp_mscale, p.qp_inverse);
    if (p.rope_pos != nullptr && tid >= 128 && tid - 128 < p.rope_half)  // read after the sums' barrier
        cs[kAttentionTailMaxHalf + tid - 128] =
            rope_cs(float(p.rope_pos[t]) * p.rope_inv_freq[tid - 128], p.rope_mscale, p.rope_inverse);
    // q as f16 times 2^shq (shq from the block's max |q|, or the prepared rows' bound) into its tile; zs: the
    // scores' scale, p.scale / 2^shq
    const float zs = p.qp_pos != nullptr ? q_tile_prepared(p, t, h0, tid, smem + Layout::q, cs,
                                                           reinterpret_cast<double*>(smem + Layout::q_sums),
                                                           reinterpret_cast<float*>(smem + Layout::q_inv))
                                         : wgtile::q_tile_f16(p, t, h0, tid, smem + Layout::q, [&](float v) {
#pragma unroll
                                               for (int o = 16; o > 0; o >>= 1)
                                                   v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
                                               if (lane == 0) red[warp] = v;
                                               wg::named_sync(kBarQMax, 256);
#pragma unroll
                                               for (int w = 0; w < 8; ++w) v = fmaxf(v, red[w]);
                                               return v;
                                           });
    wg::fence_proxy_async();  // q's stores, seen by the tensor cores' reads
    wg::named_sync(kBarQ, 256);

    float o[128];  // head_dim columns 256 c + 8 j + 2q (+1): heads g (o[4j], o[4j + 1]) and g + 8
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    const int row0 = hw + g;  // this thread's heads row0 and row0 + 8
    // the softmax in base 2: scores times log2(e), each tile's exponentials one ex2 each
    constexpr float kLog2e = 1.4426950408889634f;
    const float zs2 = zs * kLog2e;
    float m[2] = {p.sinks[h0 + row0] * kLog2e, p.sinks[h0 + row0 + 8] * kLog2e};
    float l[2] = {c == 0 ? 1.0f : 0.0f, c == 0 ? 1.0f : 0.0f};  // the sink's term, in consumer 0's sum
    int t_acc = kEmptyRowShift;  // the accumulators' scale 2^(14 + t_acc); the first tile lowers it
    const uint32_t own = base + Layout::k + uint32_t(c) * kTileBytes,
                   other = base + Layout::k + uint32_t(c ^ 1) * kTileBytes,
                   p_other = base + Layout::p + uint32_t(c ^ 1) * kPBytes;
    const int* const ksh = shifts + c * kKeys;

    for (int64_t i = 0; i < n_pairs; ++i) {
        const uint32_t par = uint32_t(i & 1);
        const int64_t j0 = (2 * i + c) * kKeys;  // this consumer's tile's first key slot
        wg::mbar_wait(k_ready + 8 * c, par);
        wg::fence_proxy_async();
        float s[32];                        // s[4j + v]: head row0 (+8 for v >= 2), key 8j + 2q + (v & 1)
        const bool own_keys = j0 < n_keys;  // false only for consumer 1's tile past a pair's last key
        if (own_keys) {
            wg::fence();
#pragma unroll
            for (int k = 0; k < 32; ++k)
                wg::mma_m64n64k16_ss(
                    s, wg::desc_k_major_sw128(base + Layout::q + (k >> 2) * kChunkBytes + (k & 3) * 32),
                    wg::desc_k_major_sw128(own + (k >> 2) * kChunkBytes + (k & 3) * 32), k > 0);
            wg::commit();
            wg::wait<0>();
            wg::keep(s);
        } else {
#pragma unroll
            for (int v = 0; v < 32; ++v) s[v] = 0.0f;
        }

        // the tile's smallest shift over its keys, each key's scale on its score column
        int t_min = min(j0 + lane < n_keys ? ksh[lane] : kEmptyRowShift,
                        j0 + lane + 32 < n_keys ? ksh[lane + 32] : kEmptyRowShift);
#pragma unroll
        for (int o2 = 16; o2 > 0; o2 >>= 1) t_min = min(t_min, __shfl_xor_sync(0xffffffffu, t_min, o2));
        float(&sv)[8][4] = reinterpret_cast<float(&)[8][4]>(s);
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int c2 = 0; c2 < 2; ++c2) {
                const int key = 8 * j + 2 * q + c2;
                const float cf = zs2 * pow2f(-ksh[key]);  // shifts lie in [-120, 120]
                const bool valid = j0 + key < n_keys;
                sv[j][c2] = valid ? sv[j][c2] * cf : -INFINITY;
                sv[j][c2 + 2] = valid ? sv[j][c2 + 2] * cf : -INFINITY;
            }

        // the running max and scale this tile starts from: consumer 0 its own (consumer 1's of the pair
        // before), consumer 1 consumer 0's of this pair
        float f_pre[2] = {1.0f, 1.0f};
        int t_in = t_acc;
        if (c == 1) {
            wg::named_sync(kBarMax0, 256);
            const float m0[2] = {max_sh[row0], max_sh[row0 + 8]};
            t_in = scale_sh[0];
#pragma unroll
            for (int h = 0; h < 2; ++h) f_pre[h] = exp2f(m[h] - m0[h]), l[h] *= f_pre[h], m[h] = m0[h];
        }
        float f[2];
        online_softmax_tile<true>(sv, m, l, f);
        // the accumulators' scale from here: never up, and at most this tile's smallest shift (so that no
        // probability exceeds 2^14 in f16)
        const int t_new = min(t_min, t_in);
#pragma unroll
        for (int h = 0; h < 2; ++h) f[h] = scalbnf(f[h] * f_pre[h], t_new - t_acc);
        t_acc = t_new;
        rescale(o, f);
        if (q == 0) max_sh[c * kHeads + row0] = m[0], max_sh[c * kHeads + row0 + 8] = m[1];
        if (tid == 128 * c) scale_sh[c] = t_acc;
        wg::named_arrive(c == 0 ? kBarMax0 : kBarMax1, 256);

        // p times 2^14 times 2^(t_acc - shift_j) as the A fragments of keys 16 ks .. + 15
        uint32_t pa[4][4];
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int j = 2 * ks + h;
                const float p0 = pow2f(p_exp(t_acc, ksh[8 * j + 2 * q])),
                            p1 = pow2f(p_exp(t_acc, ksh[8 * j + 2 * q + 1]));
                pa[ks][2 * h] = pack_f16x2(sv[j][0] * p0, sv[j][1] * p1);
                pa[ks][2 * h + 1] = pack_f16x2(sv[j][2] * p0, sv[j][3] * p1);
            }
        wg::keep(o);
        wg::keep(pa);
        wg::fence();
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
            wg::mma_m64n256k16_bt(
                o, pa[ks],
                wg::desc_mn_major_sw128(own + uint32_t(c) * 4 * kChunkBytes + ks * 2048, kChunkBytes, 1024));
        wg::commit();

        // consumer 0's probabilities for consumer 1, at the max and scale the pair ends with
        auto store_p = [&](float sc0, float sc1, int t_out) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float p0 = pow2f(p_exp(t_out, ksh[8 * j + 2 * q])),
                            p1 = pow2f(p_exp(t_out, ksh[8 * j + 2 * q + 1]));
                const uint32_t at = uint32_t(row0) * 128u + uint32_t((j ^ g) << 4) + 4u * q;
                *reinterpret_cast<uint32_t*>(smem + Layout::p + at) =
                    pack_f16x2(sv[j][0] * sc0 * p0, sv[j][1] * sc0 * p1);
                *reinterpret_cast<uint32_t*>(smem + Layout::p + at + 8 * 128) =
                    pack_f16x2(sv[j][2] * sc1 * p0, sv[j][3] * sc1 * p1);
            }
            wg::fence_proxy_async();
        };
        float g_out[2] = {1.0f, 1.0f};  // consumer 0: its accumulators' factor to consumer 1's max and scale
        if (c == 0) {
            wg::named_sync(kBarMax1, 256);
            const float m1[2] = {max_sh[kHeads + row0], max_sh[kHeads + row0 + 8]};
            const int t1 = scale_sh[1];
            const float e0 = exp2f(m[0] - m1[0]), e1 = exp2f(m[1] - m1[1]);
            store_p(e0, e1, t1);
            wg::named_arrive(kBarP0, 256);
            l[0] *= e0, l[1] *= e1, m[0] = m1[0], m[1] = m1[1];
            g_out[0] = scalbnf(e0, t1 - t_acc), g_out[1] = scalbnf(e1, t1 - t_acc);
            t_acc = t1;
            wg::wait<0>();
        } else {  // its own probabilities as they are: the A fragments' words
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const uint32_t at = uint32_t(row0) * 128u + uint32_t((j ^ g) << 4) + 4u * q;
                *reinterpret_cast<uint32_t*>(smem + Layout::p + kPBytes + at) = pa[j >> 1][2 * (j & 1)];
                *reinterpret_cast<uint32_t*>(smem + Layout::p + kPBytes + at + 8 * 128) =
                    pa[j >> 1][2 * (j & 1) + 1];
            }
            wg::fence_proxy_async();
            wg::named_arrive(kBarP1, 256);
            wg::wait<0>();
        }
        wg::keep(o);
        wg::keep(pa);
        wg::mbar_arrive(k_free + 8 * c);  // this consumer's reads of its own tile are done

        // the other tile's probabilities times this consumer's half of its rows (its copies landed: the other
        // consumer waited for them before its scores)
        wg::named_sync(c == 0 ? kBarP1 : kBarP0, 256);
        wg::mbar_wait(k_ready + 8 * (c ^ 1), par);
        rescale(o, g_out);
        wg::keep(o);
        if ((2 * i + (c ^ 1)) * kKeys < n_keys) {  // the other tile has keys (not consumer 1's last, empty)
            wg::fence();
#pragma unroll
            for (int ks = 0; ks < 4; ++ks)
                wg::mma_m64n256k16_ss_bt(
                    o, wg::desc_k_major_sw128(p_other + ks * 32),
                    wg::desc_mn_major_sw128(other + uint32_t(c) * 4 * kChunkBytes + ks * 2048, kChunkBytes,
                                            1024));
            wg::commit();
            wg::wait<0>();
            wg::keep(o);
        }
        wg::mbar_arrive(k_free + 8 * (c ^ 1));
    }

    // the two consumers' sums (both at the last max), then the output
    if (q == 0) sums[c * kHeads + row0] = l[0], sums[c * kHeads + row0 + 8] = l[1];
    wg::named_sync(kBarSums, 256);
    const float out_scale = scalbnf(1.0f, -(14 + t_acc));
    const float inv[2] = {out_scale / (sums[row0] + sums[kHeads + row0]),
                          out_scale / (sums[row0 + 8] + sums[kHeads + row0 + 8])};
    if (p.oq != nullptr)
        store_out_quantised(p, t, h0 + row0, c, q, o, inv,
                            p.rope_pos != nullptr ? cs + kAttentionTailMaxHalf : nullptr);
    else if (p.rope_pos != nullptr)
        store_out_rows_rotated(p, t, h0 + row0, 256 * c + 2 * q, o, inv, cs + kAttentionTailMaxHalf);
    else
        wgtile::store_out_rows(p, t, h0 + row0, 256 * c + 2 * q, o, inv);
}

__global__ void __launch_bounds__(kThreads, 1) attention_wgp_kernel(AttentionParams p, F16Rows r, int ahead) {
    wgp_block(p, r, blockIdx.x, int64_t(blockIdx.y) * kHeads, ahead > 0 ? int64_t(blockIdx.x) + ahead : -1);
}

// A decode batch: block (job blockIdx.x, heads 64 blockIdx.y ..), one query a job; the jobs' params read
// from the table, the same body and so the same bits as the job's own launch.
__global__ void __launch_bounds__(kThreads, 1)
    attention_wgp_batch_kernel(const AttentionF16Job* __restrict__ jobs) {
    const AttentionF16Job& j = jobs[blockIdx.x];
    if (int64_t(blockIdx.y) * kHeads >= j.p.H) return;
    wgp_block(j.p, j.r, 0, int64_t(blockIdx.y) * kHeads);
}

}  // namespace

bool attention_wgp_fits(const AttentionParams& p) { return smem_bytes(p) <= 227 * 1024; }

void launch_attention_wgp(const AttentionParams& p, const F16Rows& r, cudaStream_t s) {
    const size_t smem = smem_bytes(p);
    raise_dynamic_smem(attention_wgp_kernel, smem);
    // blocks go out in x order (the queries of head block 0 first), a wave of one block an SM
    // off: 1.5% slower on the 4K prefill (H100, docs/benchmarks.md 2026-12-07, eighth session)
    static const bool prefetch = env_switch("DEEPINFER_ATTN_PREFETCH", false);
    const bool aligned = reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && p.q_s0 % 4 == 0 && p.q_s1 % 4 == 0 &&
                         p.hd % 4 == 0;  // cp.async.bulk's 16-byte units
    const int ahead = prefetch && aligned ? sm_count() : 0;
    attention_wgp_kernel<<<dim3(unsigned(p.L), unsigned(p.H / kHeads)), kThreads, smem, s>>>(p, r, ahead);
}

void launch_attention_wgp_batch(const AttentionF16Job* dev, const AttentionF16Job* host, int64_t count,
                                cudaStream_t s) {
    size_t smem = 0;
    int64_t head_blocks = 1;
    for (int64_t i = 0; i < count; ++i) {
        smem = std::max(smem, smem_bytes(host[i].p));
        head_blocks = std::max(head_blocks, host[i].p.H / kHeads);
    }
    raise_dynamic_smem(attention_wgp_batch_kernel, smem);
    attention_wgp_batch_kernel<<<dim3(unsigned(count), unsigned(head_blocks)), kThreads, smem, s>>>(dev);
}

}  // namespace di::cuda
