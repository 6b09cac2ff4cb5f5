// Routed experts of a prefill as W4A8 with warpgroups specialised by role (the same operands, products and
// sums as moe_w4a8_kernel's 128-token tiles, see moe_w4a8.cu): the one-warpgroup kernel converts a chunk's
// fp4 weights in the registers of the warps that issue its wgmmas, so its 8 warps an SM spend ~5 cycles per
// instruction waiting and the tensor cores idle most of the time. Here, per block (one an SM, persistent over
// the (active expert, 128-row weight tile) units):
//   warpgroup 0 copies (cp.async: the token tile's e4m3 rows, their scales, each weight row's raw fp4 bytes
//     and group scales, kAhead chunks ahead) and converts a chunk's 128 weight rows into an e4m3 tile in
//     shared memory (a thread a row; the bytes in w8_index order, as the token rows' are);
//   warpgroups 1 and 2 each multiply 64 of those rows by the token tile (wgmma m64n128k32, both operands
//     from shared memory) and promote every chunk's sums into f32 as the one-warpgroup kernel does: while
//     one promotes, the other's wgmmas keep the tensor cores busy.
// Full / empty mbarriers hand the slots over: a copy slot (token tile, raw weights) is refilled once both
// multiplying warpgroups are done with its chunk; the A tile has two slots. What a tile switch needs (the
// pair ids, the weight pointers, the rows' largest scales, the pairs the stores go to) is loaded a tile
// ahead: loaded at the switch, its dependent round trips stalled every warp (with the arithmetic switched off
// the first version still took ~2,000 of its 2,865 us a launch; docs/benchmarks.md). Off by default
// (DEEPINFER_W4A8_WS, set_moe_w4a8_ws): the first version measured slower than moe_w4a8_kernel; the
// tile-ahead loads are not yet measured.

#include <algorithm>

#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/moe_w4a8.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda::w4a8 {
namespace {

using mma::kChunk;

constexpr int kRows = 128, kN = 128;  // weight rows and token rows of a tile
constexpr int kThreads = 384;         // warpgroup 0 copies and converts, 1 and 2 multiply
constexpr int kCopySlots = 7, kASlots = 2;
constexpr int kAhead = kCopySlots - 2;  // chunk c's copies go out while chunk c - kAhead is converted
// A copy slot: the token tile (e4m3, 128-byte swizzle), raw fp4 rows (64 bytes a row), their group scales,
// the token rows' scales. An A slot: the converted tile (128-byte swizzle), the rows' fold factors. After the
// barriers: each multiplying warpgroup's current tile's pairs, then each copy slot's rows' largest scales
// (kRowBase: the converter's own, written when it copies the slot's chunk).
constexpr int kTokBytes = kN * kChunk, kRawBytes = kRows * kChunk / 2, kRawScBytes = kRows * 4;
constexpr int kCopyBytes = kTokBytes + kRawBytes + kRawScBytes + kN * 4;
constexpr int kABytes = kRows * kChunk, kASlotBytes = (kABytes + kRows * 4 + 1023) / 1024 * 1024;
constexpr int kBarBytes = 8 * (2 * kCopySlots + kASlots);
constexpr int kTailBytes = 2 * kN * 4 + kCopySlots * kRows * 4;  // the tiles' pairs, the slots' row maxima
constexpr int kSmemBytes = 1024 + kCopySlots * kCopyBytes + kASlots * kASlotBytes + kBarBytes + kTailBytes;
static_assert(kCopyBytes % 1024 == 0 && kSmemBytes <= 227 * 1024);

// One work unit: 128 rows of one active expert's n_out rows for all its pairs, in token tiles of 128.
struct Unit {
    int e = 0, b0 = 0, cnt = 0;
    int64_t tile0 = 0;  // first of the tile's n_out rows
    bool valid = false;
};

__device__ __forceinline__ Unit unit_of(const MoePlan& plan, int64_t u, int64_t row_tiles, int n_active) {
    Unit w;
    const int64_t a = u / row_tiles;
    if (a >= n_active) return w;
    w.e = plan.expert[a], w.b0 = plan.begin[a], w.cnt = plan.begin[a + 1] - w.b0;
    w.tile0 = (u % row_tiles) * kRows;
    w.valid = true;
    return w;
}

// The chunk sequence a block walks (the same in every warpgroup): its units, each unit's token tiles, each
// tile's chunks. The block's next unit is loaded a unit ahead (its fields are in registers by the switch).
struct Walk {
    int64_t u, c = 0, chunks, row_tiles;
    int i0 = 0, n_active;
    Unit w, nw;
    __device__ Walk(const MoePlan& plan, int64_t chunks_, int64_t row_tiles_, int n_active_)
        : u(blockIdx.x), chunks(chunks_), row_tiles(row_tiles_), n_active(n_active_) {
        w = unit_of(plan, u, row_tiles, n_active);
        nw = unit_of(plan, u + gridDim.x, row_tiles, n_active);
    }
    // Returns whether the next chunk starts a new tile.
    __device__ bool next(const MoePlan& plan) {
        if (++c < chunks) return false;
        c = 0;
        i0 += kN;
        if (i0 >= w.cnt) {
            i0 = 0;
            u += gridDim.x;
            w = nw;
            nw = unit_of(plan, u + gridDim.x, row_tiles, n_active);
        }
        return true;
    }
    // The tile after the current one: its unit and first token row.
    __device__ void following(Unit& fw, int& fi0) const {
        if (i0 + kN < w.cnt)
            fw = w, fi0 = i0 + kN;
        else
            fw = nw, fi0 = 0;
    }
};

template <bool kRowBase>
__global__ void __launch_bounds__(kThreads, 1) moe_w4a8_ws_kernel(MoeParams p, MoePlan plan, W8Io io) {
    allow_early_next();
    extern __shared__ __align__(128) uint8_t smem[];
    const uint32_t smem0 = (wg::smem_addr(smem) + 1023u) & ~1023u;  // the swizzle's 1024-byte alignment
    uint8_t* const base = smem + (smem0 - wg::smem_addr(smem));
    const uint32_t a0 = smem0 + kCopySlots * kCopyBytes, bar0 = a0 + kASlots * kASlotBytes;
    auto full = [&](int64_t s) { return bar0 + uint32_t(s) * 8; };  // converted + copied: 4 converter warps
    auto copy_free = [&](int64_t s) { return bar0 + uint32_t(kCopySlots + s) * 8; };   // 8 multiplying warps
    auto a_free = [&](int64_t s) { return bar0 + uint32_t(2 * kCopySlots + s) * 8; };  // the same
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (tid == 0) {
        for (int s = 0; s < kCopySlots; ++s) wg::mbar_init(full(s), 4), wg::mbar_init(copy_free(s), 8);
        for (int s = 0; s < kASlots; ++s) wg::mbar_init(a_free(s), 8);
    }
    __syncthreads();
    int32_t* const tile_pairs =
        reinterpret_cast<int32_t*>(base + kCopySlots * kCopyBytes + kASlots * kASlotBytes + kBarBytes);
    int32_t* const row_maxes = tile_pairs + 2 * kN;
    const int64_t chunks = io.K / kChunk, row_tiles = io.n_out / kRows;
    const int n_active = *plan.n_active;
    if (warp < 4) {
        // ---- copies and conversion: thread t owns weight row t of the tile ----
        const int t = tid;
        Walk cp(plan, chunks, row_tiles, n_active), cv = cp;
        // The copy cursor's tile: token rows of units t % 8 (rows t / 8 + 16 i), row t's weights, scales and
        // largest scale (kRowBase); the next tile's, prefetched while this one is copied (made at the switch,
        // these dependent loads stalled the copies and so every warp).
        const int c_unit = t & 7;
        const uint32_t dst0 = uint32_t((t >> 3) * 128 + ((c_unit ^ ((t >> 3) & 7)) * 16));
        int32_t src_row[kN / 16], sc_row = 0, row_max = 0;
        const uint8_t* wrow = nullptr;
        const uint8_t* srow = nullptr;
        int32_t n_pair[kN / 16], n_sc = -1;
        const uint8_t* n_data = nullptr;
        const uint8_t* n_scale = nullptr;
        int64_t n_ld = 0, n_ldsc = 0, n_row0 = 0, n_words = 0;
        bool n_valid = false, n_unit = false;  // n_unit: the next tile starts a unit (its row max is needed)
        uint32_t n_m4 = 0, pend0 = 0,
                 pend1 = 0;  // the next unit's bytewise scale maxima; words loaded last step
        auto prefetch = [&](const Unit& fw, int fi0) {
#pragma unroll
            for (int i = 0; i < kN / 16; ++i) {
                const int r = fi0 + 16 * i + (t >> 3);
                n_pair[i] = r < fw.cnt ? plan.pairs[fw.b0 + r] : -1;
            }
            n_sc = fi0 + t < fw.cnt ? plan.pairs[fw.b0 + fi0 + t] : -1;
            const int m = io.up ? (fw.tile0 < p.I ? 0 : 1) : 2;
            n_row0 = fw.tile0 - (m == 1 ? p.I : 0) + t;
            const WeightRef& wr = p.table[3 * fw.e + m];
            n_data = static_cast<const uint8_t*>(wr.data), n_ld = wr.ld;
            n_scale = static_cast<const uint8_t*>(wr.scale), n_ldsc = wr.ld_scale;
            n_unit = fi0 == 0, n_m4 = 0, pend0 = 0, pend1 = 0, n_words = 0;
        };
        auto scale_word = [&](int64_t c) {
            return c < chunks ? *reinterpret_cast<const uint32_t*>(n_scale + n_row0 * n_ldsc + 4 * c) : 0u;
        };
        auto scales_step = [&]() {  // two of the next unit's scale words a chunk, folded a chunk later
            n_m4 = __vmaxu4(n_m4, __vmaxu4(pend0, pend1));
            pend0 = scale_word(n_words), pend1 = scale_word(n_words + 1);
            n_words += 2;
        };
        auto switch_tile = [&]() {  // the copy cursor entered the prefetched tile
            if (!cp.w.valid) return;
            if (kRowBase && n_unit) {
                n_m4 = __vmaxu4(n_m4, __vmaxu4(pend0, pend1));
                for (; n_words < chunks; ++n_words) n_m4 = __vmaxu4(n_m4, scale_word(n_words));
                row_max = max_byte(n_m4);
            }
#pragma unroll
            for (int i = 0; i < kN / 16; ++i)
                src_row[i] = n_pair[i] < 0 ? -1 : io.up ? n_pair[i] / int32_t(p.k) : n_pair[i];
            // a row past the tokens takes row 0's scale (its products are zeros)
            sc_row = n_sc < 0 ? 0 : io.up ? n_sc / int32_t(p.k) : n_sc;
            wrow = n_data + n_row0 * n_ld, srow = n_scale + n_row0 * n_ldsc;
        };
        const int sw =
            (t >> 1) & 3;  // raw row t's 16-byte unit i at i ^ sw (conflict-free reads a row a thread)
        auto issue = [&](int64_t slot) {
            const uint32_t st = smem0 + uint32_t(slot) * kCopyBytes;
            const int64_t c = cp.c;
#pragma unroll
            for (int i = 0; i < kN / 16; ++i)  // rows past the tokens: zeros (the source mapped, not read)
                wg::cp_async16(st + dst0 + i * 2048,
                               io.act + (int64_t(max(src_row[i], 0)) * chunks + c) * kChunk + c_unit * 16,
                               src_row[i] >= 0);
#pragma unroll
            for (int i = 0; i < 4; ++i)
                wg::cp_async16(st + kTokBytes + t * 64 + ((i ^ sw) * 16), wrow + c * 64 + i * 16, true);
            wg::cp_async4(st + kTokBytes + kRawBytes + t * 4, srow + c * 4);
            wg::cp_async4(st + kTokBytes + kRawBytes + kRawScBytes + t * 4,
                          io.sc + int64_t(sc_row) * chunks + c);
            if (kRowBase) row_maxes[slot * kRows + t] = row_max;  // read back by this thread only
        };
        int64_t it_copy = 0;
        auto copy_next = [&]() {  // one commit group per call, empty past the walk's end
            if (cp.w.valid) {
                const int64_t slot = it_copy % kCopySlots;
                wg::mbar_wait(copy_free(slot), uint32_t(((it_copy / kCopySlots) & 1) ^ 1));
                issue(slot);
                if (cp.c == 0) {
                    Unit fw;
                    int fi0;
                    cp.following(fw, fi0);
                    n_valid = fw.valid;
                    if (n_valid) prefetch(fw, fi0);
                } else if (kRowBase && n_valid && n_unit && cp.c >= 2) {
                    scales_step();
                }
                if (cp.next(plan)) switch_tile();
            }
            wg::cp_async_commit();
            ++it_copy;
        };
        if (cp.w.valid) prefetch(cp.w, 0), n_unit = true;
        switch_tile();
        for (int i = 0; i < kAhead; ++i) copy_next();
        for (int64_t it = 0; cv.w.valid; ++it) {
            copy_next();
            const int64_t slot = it % kCopySlots, aslot = it % kASlots;
            wg::mbar_wait(a_free(aslot), uint32_t(((it / kASlots) & 1) ^ 1));
            wg::cp_async_wait<kAhead>();  // this thread's copies of chunk it landed
            const uint8_t* raw = base + slot * kCopyBytes + kTokBytes;
            uint4 r[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                r[i] = *reinterpret_cast<const uint4*>(raw + t * 64 + ((i ^ sw) * 16));
            const uint32_t s4 = *reinterpret_cast<const uint32_t*>(raw + kRawBytes + t * 4);
            const int bmax = kRowBase ? row_maxes[slot * kRows + t] : max_byte(s4);
            uint8_t* at = base + kCopySlots * kCopyBytes + aslot * kASlotBytes;
            reinterpret_cast<float*>(at + kABytes)[t] = fold_factor(bmax);
            chunk_row_to_tile(r, s4, bmax, at + t * 128, t);
            wg::fence_proxy_async();  // the tile's and the copies' bytes, for the wgmmas' proxy
            __syncwarp();
            if (lane == 0) wg::mbar_arrive(full(slot));
            cv.next(plan);
        }
        wg::cp_async_wait<0>();
        return;
    }
    // ---- products: warpgroup h = 0, 1 multiplies rows 64 h .. 64 h + 63 of the tile ----
    const int h = (warp >> 2) - 1, wq = warp & 3, g = lane >> 2, q = lane & 3;
    const int rloc = 64 * h + 16 * wq + g;  // this thread's rows: rloc, rloc + 8
    Walk cs(plan, chunks, row_tiles, n_active);
    int32_t* const tp = tile_pairs + h * kN;
    float acc[kN / 2], part[kN / 2];
    for (int64_t it = 0; cs.w.valid;) {
#pragma unroll
        for (int v = 0; v < kN / 2; ++v) acc[v] = 0.0f;
        float f0 = 1.0f, f1 = 1.0f;  // kRowBase: the rows' fold factors, applied once at the end
        const Unit w = cs.w;
        const int i0 = cs.i0;
        // The tile's pairs (-1 past its tokens) for the stores at its end, loaded now: read there one by one
        // they were a chain of dependent L2 round trips (the stores may alias them).
        wg::named_sync(1 + h, 128);  // the previous tile's stores have read tp
        const int ct = tid - 128 * (h + 1);
        tp[ct] = i0 + ct < w.cnt ? plan.pairs[w.b0 + i0 + ct] : -1;
        bool tile_end = false;
        for (; !tile_end; ++it) {
            const int64_t slot = it % kCopySlots, aslot = it % kASlots;
            wg::mbar_wait(full(slot), uint32_t((it / kCopySlots) & 1));
            const uint32_t st = smem0 + uint32_t(slot) * kCopyBytes;
            const uint32_t at = a0 + uint32_t(aslot) * kASlotBytes;
            wg::fence();
#pragma unroll
            for (int s = 0; s < 4; ++s)
                wg::mma_m64n128k32_e4m3_ss(part, wg::desc_k_major_sw128(at + h * 8192 + s * 32),
                                           wg::desc_k_major_sw128(st + s * 32), s);
            wg::commit();
            wg::wait<0>();
#pragma unroll
            for (int v = 0; v < kN / 2; ++v) wg::keep(part[v]);
            const float* ts = reinterpret_cast<const float*>(base + slot * kCopyBytes + kTokBytes +
                                                             kRawBytes + kRawScBytes);
            const float* rfs = reinterpret_cast<const float*>(base + kCopySlots * kCopyBytes +
                                                              aslot * kASlotBytes + kABytes);
            const float rf0 = rfs[rloc], rf1 = rfs[rloc + 8];
            if (kRowBase) f0 = rf0, f1 = rf1;
            promote_chunk<kN, kRowBase>(acc, part, ts, q, rf0, rf1);
            __syncwarp();
            if (lane == 0) wg::mbar_arrive(copy_free(slot)), wg::mbar_arrive(a_free(aslot));
            tile_end = cs.next(plan);
        }
        wg::named_sync(1 + h, 128);  // the tile's pairs are in tp
#pragma unroll
        for (int j = 0; j < kN / 8; ++j)
#pragma unroll
            for (int cc = 0; cc < 2; ++cc) {
                const int32_t pair = tp[8 * j + 2 * q + cc];
                if (pair < 0) continue;
                float* out = io.out + int64_t(pair) * io.n_out + w.tile0 + rloc;
                out[0] = kRowBase ? acc[4 * j + cc] * f0 : acc[4 * j + cc];
                out[8] = kRowBase ? acc[4 * j + 2 + cc] * f1 : acc[4 * j + 2 + cc];
            }
    }
}

}  // namespace

template <bool kRowBase>
void launch_ws(const MoeParams& p, const MoePlan& plan, const W8Io& io, unsigned slots, cudaStream_t s) {
    raise_dynamic_smem(moe_w4a8_ws_kernel<kRowBase>, kSmemBytes);
    const int64_t units = int64_t(slots) * (io.n_out / kRows);
    const unsigned grid = unsigned(std::min<int64_t>(units, sm_count()));
    moe_w4a8_ws_kernel<kRowBase><<<grid, kThreads, kSmemBytes, s>>>(p, plan, io);
}

template void launch_ws<true>(const MoeParams&, const MoePlan&, const W8Io&, unsigned, cudaStream_t);
template void launch_ws<false>(const MoeParams&, const MoePlan&, const W8Io&, unsigned, cudaStream_t);

}  // namespace di::cuda::w4a8
