// Prefill attention of the native precision on the warpgroup tensor cores: the mma64 variant's queries
// (head_dim 512, 64 heads a block, key rows already f16 with their own shifts: attention_f16_rows.cuh) under
// set_attention_wgmma(1), off (slower than attention_wgp.cu, the default). Block (query t, 64 heads), two
// warpgroups.
//   q:       the query's 64 heads x 512 as f16 with one power-of-two scale, in shared memory K-major with the
//            128-byte swizzle: 8 chunks of 64 columns, each 64 rows x 128 bytes (the 16-byte unit c of row r
//            at c ^ (r % 8))
//   keys:    64-key tiles of the converted rows in the same layout, two in flight (cp.async)
//   scores:  each warpgroup computes all 64 x 64 (wgmma m64n64k16, both operands in shared memory, 32
//            k-steps): the same bits in both, so nothing is exchanged between them
//   softmax: online from the sink, as mma64's: each key's scale applied to its score column, the
//            probabilities times 2^(14 + T - shift_j) rounded to f16 (T: the accumulators' scale)
//   output:  warpgroup w accumulates head_dim columns 256 w .. + 255 (wgmma m64n256k16: the probabilities as
//            A from registers, the key tile as an MN-major B: the same bytes the scores read)
// Precision as mma64's (f16 q, keys and probabilities, f32 sums); the sums in a fixed order: deterministic,
// and a query's result does not depend on the other queries.
#include "ops/cuda/attention_f16_rows.cuh"
#include "ops/cuda/attention_keys.cuh"
#include "ops/cuda/attention_wg_tiles.cuh"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {
namespace {

using namespace mma;
using wgtile::kChunkBytes, wgtile::kTileBytes, wgtile::unit_at;

constexpr int kHeads = 64, kKeys = 64, kWarps = 8, kThreads = 32 * kWarps, kStages = 2;
size_t smem_bytes(const AttentionParams& p) {
    return 1024 + 3 * size_t(kTileBytes) + size_t(kStages * kKeys) * sizeof(int) + kWarps * sizeof(float) +
           size_t(p.comp_mask == AttnCompMask::kPicks ? 2 * p.k : 0) * sizeof(int32_t);
}

__global__ void __launch_bounds__(kThreads, 1) attention_wg_kernel(AttentionParams p, F16Rows r) {
    allow_early_next();
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const uint32_t base = (wg::smem_addr(smem_raw) + 1023u) & ~1023u;  // the swizzle's 1024-byte atoms
    unsigned char* const smem = smem_raw + (base - wg::smem_addr(smem_raw));
    const uint32_t q_s = base, tiles_s = base + kTileBytes;  // stage st at tiles_s + st * kTileBytes
    int* const tile_sh = reinterpret_cast<int*>(smem + 3 * kTileBytes);      // [kStages][kKeys]
    float* const red = reinterpret_cast<float*>(tile_sh + kStages * kKeys);  // [kWarps]
    int32_t* const list = reinterpret_cast<int32_t*>(red + kWarps);          // [2k] picks, keep flags
    const int64_t t = blockIdx.x, h0 = int64_t(blockIdx.y) * kHeads;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const int wgi = warp >> 2, hw = 16 * (warp & 3);  // the warpgroup, the warp's 16 heads
    const int u = tid & 63, r0 = tid >> 6;            // this thread's unit, rows r0 + 4 i (copies)

    const QueryKeys keys = query_keys(p, t, list);
    const int64_t lo = keys.lo, n_win = keys.n_win, n_keys = n_win + keys.n_comp;
    const int64_t n_tiles = (n_keys + kKeys - 1) / kKeys;

    // tile `tile` into its stage and the rows' shifts
    auto issue = [&](int64_t tile) {
        const int st = int(tile % kStages);
        const uint32_t dst = tiles_s + uint32_t(st) * kTileBytes;
        const int64_t j0 = tile * kKeys;
#pragma unroll 4
        for (int i = 0; i < 16; ++i) {
            const int row = r0 + 4 * i;
            copy_key_unit(p, r, j0 + row, n_keys, lo, n_win, list, u, dst + unit_at(row, u));
        }
        if (tid < kKeys) tile_sh[st * kKeys + tid] = key_shift(p, r, j0 + tid, n_keys, lo, n_win, list);
    };
    issue(0);
    wg::cp_async_commit();

    // q as f16 times 2^shq (shq from the block's max |q|), into its swizzled tile; zs: the scores' scale,
    // p.scale / 2^shq
    const float zs =
        wgtile::q_tile_f16(p, t, h0, tid, smem, [&](float v) { return block_max<kWarps>(v, red); });

    float o[128];  // head_dim columns 256 wgi + 8 j + 2q (+1): heads g (o[4j], o[4j + 1]) and g + 8
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    float m[2] = {p.sinks[h0 + hw + g], p.sinks[h0 + hw + g + 8]}, l[2] = {1.0f, 1.0f};
    int t_prev = 0;  // the accumulators' scale 2^(14 + t_prev)

    for (int64_t tile = 0; tile < n_tiles; ++tile) {
        if (tile + 1 < n_tiles) issue(tile + 1);
        wg::cp_async_commit();
        wg::cp_async_wait<1>();   // this thread's copies of `tile` have landed
        wg::fence_proxy_async();  // the copies and q's stores, seen by the tensor cores' reads
        __syncthreads();          // everyone's (and the shifts)
        const int st = int(tile % kStages);
        const uint32_t kt = tiles_s + uint32_t(st) * kTileBytes;
        const int* ksh = tile_sh + st * kKeys;

        float s[32];  // s[4j + v]: head hw + g (+8 for v >= 2), key 8j + 2q + (v & 1)
        wg::fence();
#pragma unroll
        for (int k = 0; k < 32; ++k)
            wg::mma_m64n64k16_ss(s, wg::desc_k_major_sw128(q_s + (k >> 2) * kChunkBytes + (k & 3) * 32),
                                 wg::desc_k_major_sw128(kt + (k >> 2) * kChunkBytes + (k & 3) * 32), k > 0);
        wg::commit();
        wg::wait<0>();
#pragma unroll
        for (int i = 0; i < 32; ++i) wg::keep(s[i]);

        int t_min = min(ksh[lane], ksh[lane + 32]);  // the tile's smallest shift
#pragma unroll
        for (int o2 = 16; o2 > 0; o2 >>= 1) t_min = min(t_min, __shfl_xor_sync(0xffffffffu, t_min, o2));
        float(&sv)[8][4] = reinterpret_cast<float(&)[8][4]>(s);
        int kshift[8][2];
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) kshift[j][c] = ksh[8 * j + 2 * q + c];
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int key = 8 * j + 2 * q + (v & 1);
                sv[j][v] =
                    tile * kKeys + key < n_keys ? sv[j][v] * scalbnf(zs, -kshift[j][v & 1]) : -INFINITY;
            }
        float f[2];
        online_softmax_tile(sv, m, l, f);
        // the accumulators' scale from here: never up, and at most this tile's smallest shift (so that no
        // probability exceeds 2^14 in f16)
        const int t_ref = tile == 0 ? t_min : min(t_min, t_prev);
#pragma unroll
        for (int i = 0; i < 2; ++i) f[i] = tile == 0 ? 0.0f : scalbnf(f[i], t_ref - t_prev);
        t_prev = t_ref;
#pragma unroll
        for (int j = 0; j < 32; ++j)
            o[4 * j] *= f[0], o[4 * j + 1] *= f[0], o[4 * j + 2] *= f[1], o[4 * j + 3] *= f[1];
        // p times 2^14 times 2^(t_ref - shift_j) as the A fragments of keys 16 ks .. + 15
        uint32_t pa[4][4];
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int j = 2 * ks + h;
                const float p0 = pow2f(max(14 + t_ref - kshift[j][0], -126)),
                            p1 = pow2f(max(14 + t_ref - kshift[j][1], -126));
                pa[ks][2 * h] = pack_f16x2(sv[j][0] * p0, sv[j][1] * p1);
                pa[ks][2 * h + 1] = pack_f16x2(sv[j][2] * p0, sv[j][3] * p1);
            }
            // the rescaled accumulators and the fragments written before the fence that orders them against
            // the tensor cores' reads
#pragma unroll
        for (int i = 0; i < 128; ++i) wg::keep(o[i]);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
#pragma unroll
            for (int i = 0; i < 4; ++i) wg::keep(pa[ks][i]);
        wg::fence();
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
            wg::mma_m64n256k16_bt(
                o, pa[ks],
                wg::desc_mn_major_sw128(kt + uint32_t(wgi) * 4 * kChunkBytes + ks * 2048, kChunkBytes, 1024));
        wg::commit();
        wg::wait<0>();
#pragma unroll
        for (int i = 0; i < 128; ++i) wg::keep(o[i]);
        __syncthreads();  // the stage is free again
    }
    wg::cp_async_wait<0>();
    const float out_scale = scalbnf(1.0f, -(14 + t_prev));
    const float inv[2] = {out_scale / l[0], out_scale / l[1]};
    wgtile::store_out_rows(p, t, h0 + hw + g, 256 * wgi + 2 * q, o, inv);
}

}  // namespace

bool attention_wg_fits(const AttentionParams& p) { return smem_bytes(p) <= 227 * 1024; }

void launch_attention_wg(const AttentionParams& p, const F16Rows& r, cudaStream_t s) {
    const size_t smem = smem_bytes(p);
    raise_dynamic_smem(attention_wg_kernel, smem);
    attention_wg_kernel<<<dim3(unsigned(p.L), unsigned(p.H / kHeads)), kThreads, smem, s>>>(p, r);
}

}  // namespace di::cuda
