// Routed experts of a prefill as W4A8 on tile-ordered token rows (moe_w4a8_bulk.cu's inputs and units), with
// the weights converted by a warpgroup of their own into e4m3 tiles in shared memory, so that the multiplying
// warpgroups issue wgmmas with both operands there and promote, nothing else (the same operands, products and
// sums as moe_w4a8_kernel's 128-token tiles: the same bits). Per block (one an SM, persistent over (active
// expert, 128-row weight tile) units, each taken from a counter when the block is ready for it):
//   warpgroup 2 converts: thread t owns weight row t of the tile, copies its fp4 bytes by cp.async kRing - 1
//     chunks ahead into a ring of its own, reads its scale words through L1 (the row's largest at the unit's
//     start, for the row fold), and writes chunk c's 128 e4m3 bytes (in the token rows' k order, swizzled as
//     wgmma reads them) and its fold factor into the chunk's stage; its first lane also takes the stage's
//     token tile and scales by bulk copy;
//   warpgroups 0 and 1 each multiply 64 of the tile's rows by the token tile (wgmma m64n128k32, A and B from
//     shared memory), wait, promote the chunk's sums into f32 and release the stage.
// Stages: kStages chunks (token tile, e4m3 weight tile, token scales, row factors) between the two sides;
// full / empty mbarriers. The converting side is what moe_w4a8_ws.cu's warp-specialised kernel did with the
// token rows gathered by cp.async and two A slots; here the tokens come with one bulk copy a chunk and every
// stage carries its own A tile.
// kConv = 2 (set_moe_w4a8_bulk_ss(2)): two converting warpgroups, warpgroup 2 + j taking the chunks c with
// c % 2 == j, each with a ring of its own. With one, a converting warp alone on its scheduler runs ~175
// dependent instructions a chunk, longer than the chunk's wgmmas; two halve a warp's share. 512 threads leave
// 128 registers a thread at launch: the converting warpgroups give back all but kConvRegs, the multiplying
// ones take kMulRegs (setmaxnreg). With TiledIo::narrow (tiles of <= 64 / 96 pairs by wgmma n64 / n96) this
// is the default wherever the bulk inputs apply (H100, 4 layers: the MoE 4.3% faster at 4K, 2.7% at 32K than
// moe_w4a8_kernel; two converters alone slower; docs/benchmarks.md). The multiplying side sits at ptxas's
// register limit: clock probes added to this kernel (a template flag, no code in the default's form but a
// field in TiledIo) made ptxas serialise the default's wgmmas (C7511, "insufficient register resources");
// check `-Xptxas -v` for C7511 on the kConv = 2 instantiations after any change here (the kConv = 1 forms
// have had it since the narrow tiles). The multiplying loop: Nsight Compute on one launch (H100, 2026-12-07)
// counted ~226 instructions a multiplying warp a chunk, ~115 of them the descriptors' arithmetic, the
// k-steps' branches on the tile width and moves, with the SM's issue slots 44% busy at ~1,800 cycles a chunk
// where its wgmmas need ~400-500; so the kRowBase form runs one loop a tile width and both forms add the
// stage's offset to two descriptors made once (the !kRowBase form keeps one loop over the widths: a loop a
// width made ptxas serialise its wgmmas, C7511), and the converters count stages in 32 bits: the MoE 7.2%
// faster at 4K and 5.9% at 32K (H100, docs/benchmarks.md 2026-12-07). Now the multiplying warps wait for the
// converting ones (~13 retries of a full barrier's try-wait a chunk), whose exposed loads are a chunk's scale
// word (loaded just before the stage's wait) and a unit's scale row at its start. A form loading both ahead
// (branch wip/w4a8-converter-ahead) needed one multiplying loop over the widths to keep ptxas from
// serialising its wgmmas, and was 8-10% slower (H100, docs/benchmarks.md 2026-12-07, second session).

#include <algorithm>
#include <type_traits>

#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/moe_w4a8.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda::w4a8 {
namespace {

using mma::kChunk;

constexpr int kRows = 128, kN = 128;  // weight rows and token rows of a tile
// two multiplying warpgroups, then kConv converting ones
__host__ __device__ constexpr int threads(int conv) { return 256 + 128 * conv; }
// a converting thread's raw chunks (its warpgroup's): ring(kConv) - 1 in flight
__host__ __device__ constexpr int ring(int conv) { return conv == 1 ? 4 : 3; }
constexpr int kConvRegs = 88, kMulRegs = 168;  // kConv = 2: 256 x (88 + 168) = the SM's 64 K registers
static_assert(256 * (128 - kConvRegs) >= 256 * (kMulRegs - 128));
constexpr int kTokBytes = kN * kChunk, kABytes = kRows * kChunk;
constexpr int kStageBytes = kTokBytes + kABytes + kN * 4 + kRows * 4;  // + token scales, row factors
constexpr int kRawBytes = kRows * kChunk / 2;                          // a ring slot: 64 bytes a row
constexpr int kStages = 5;
static_assert(kStageBytes % 1024 == 0);

// wgmma m64nNTk32 e4m3, both operands in shared memory
template <int NT>
__device__ __forceinline__ void mma_e4m3_ss(float (&d)[NT / 2], uint64_t a, uint64_t b, int accumulate) {
    if constexpr (NT == 128)
        wg::mma_m64n128k32_e4m3_ss(d, a, b, accumulate);
    else if constexpr (NT == 96)
        wg::mma_m64n96k32_e4m3_ss(d, a, b, accumulate);
    else
        wg::mma_m64n64k32_e4m3_ss(d, a, b, accumulate);
}

// swiglu_clamped out of line: its double-precision work inlined into the multiplying warps' epilogue made
// ptxas serialise their wgmmas (C7511)
__device__ __noinline__ float swiglu_call(float g, float u, float limit) {
    return swiglu_clamped(g, u, limit);
}

// kTma's ring: a warp's box of 32 fp4 rows (64 bytes a row at byte column x, from row y) issued by its lane
// 0 onto barrier bar, and the wait for one. Out of line: inlined, either made ptxas serialise the multiplying
// warps' wgmmas (C7511)
__device__ __noinline__ void raw_box(uint32_t dst, const void* map, int32_t x, int32_t y, uint32_t bar) {
    wg::mbar_arrive_expect_tx(bar, 32 * 64);
    wg::tma_load_2d(dst, map, x, y, bar);
}
__device__ __noinline__ void raw_wait(uint32_t bar, uint32_t parity) { wg::mbar_wait(bar, parity); }

struct UnitInfo {
    int32_t e, b0, cnt, group;  // expert, first plan index, pairs, row group; e < 0: the walk's end
};

// tma: and the ring slots' barriers, one a converting warp and slot
__host__ __device__ constexpr int64_t smem_bytes(int conv, bool tma = false) {
    return 1024 + int64_t(kStages) * kStageBytes + conv * ring(conv) * kRawBytes + 2 * 16 + 2 * kN * 4 +
           8 * (2 * kStages + 4) + 2 * 4 + (tma ? 8 * conv * 4 * ring(conv) : 0);
}

// kSwi (TiledIo::swi_out; kRowBase, the up pass): tiles of W1 and W3 rows a column pair, h stored.
// kTma (TiledIo::tma): the ring's fp4 bytes come by TMA, a box of a converting warp's 32 rows a chunk (one
// instruction, issued by its lane 0, completing on the slot's barrier of that warp) instead of four cp.async
// a thread: a converting thread then has no copy of its own in flight when its proxy fence (MEMBAR.ALL.CTA in
// the SASS) runs after each chunk's stores (bench/fence_probe.cu: whether the fence waits for such copies).
// kBf16 (TiledIo::bf16_out): the sums stored as bf16, rounded to nearest even.
template <bool kRowBase, int kConv, bool kSwi = false, bool kTma = false, bool kBf16 = false>
__global__ void __launch_bounds__(threads(kConv), 1)
    moe_w4a8_bulk_ss_kernel(MoeParams p, MoePlan plan, TiledIo io) {
    static_assert(!kSwi || kRowBase);
    static_assert(!kTma || (kRowBase && !kSwi));  // a TMA box is 32 consecutive rows of one matrix
    static_assert(!kBf16 || !kSwi);
    constexpr int kRing = ring(kConv);
    allow_early_next();
    extern __shared__ __align__(128) uint8_t smem[];
    const uint32_t s0 = (wg::smem_addr(smem) + 1023u) & ~1023u;  // the swizzle's 1024-byte alignment
    uint8_t* const base = smem + (s0 - wg::smem_addr(smem));
    uint8_t* const rings = base + kStages * kStageBytes;  // [converting warpgroup][kRing][kRows][64]
    auto* const uinfo =
        reinterpret_cast<UnitInfo*>(rings + kConv * kRing * kRawBytes);  // two slots, 32 bytes
    int32_t* const tpairs =
        reinterpret_cast<int32_t*>(rings + kConv * kRing * kRawBytes + 2 * 16);  // [warpgroup][kN]
    const uint32_t bar0 = wg::smem_addr(tpairs + 2 * kN);
    // the converting warpgroup's next units, two slots: its first thread takes each from the pass's counter
    // (plan.work: up's, down's; zero after the plan kernel)
    int32_t* const next_u =
        reinterpret_cast<int32_t*>(reinterpret_cast<uint8_t*>(tpairs + 2 * kN) + 8 * (2 * kStages + 4));
    // kTma: the ring slots' barriers [converting warpgroup][warp][kRing], after next_u
    constexpr uint32_t kRawBar = 8 * (2 * kStages + 4) + 8;  // their offset from bar0
    // a stage's barriers: full (4 converting warps + the bytes' arrival), empty (8 multiplying warps)
    auto full = [&](uint32_t s) { return bar0 + s * 8; };
    auto empty = [&](uint32_t s) { return bar0 + (kStages + s) * 8; };
    auto ufull = [&](int i) { return bar0 + uint32_t(2 * kStages + i) * 8; };       // 1 arrival
    auto uempty = [&](int i) { return bar0 + uint32_t(2 * kStages + 2 + i) * 8; };  // 8 multiplying warps
    // a stage: token tile, A tile, token scales, row factors
    auto tok_at = [&](uint32_t s) { return s0 + uint32_t(s * kStageBytes); };
    auto a_at = [&](uint32_t s) { return s0 + uint32_t(s * kStageBytes + kTokBytes); };
    auto tsc = [&](uint32_t s) {
        return reinterpret_cast<float*>(base + s * kStageBytes + kTokBytes + kABytes);
    };
    auto rfs = [&](uint32_t s) { return tsc(s) + kN; };
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    if (tid == 0) {
        for (int s = 0; s < kStages; ++s) wg::mbar_init(full(s), 5), wg::mbar_init(empty(s), 8);
        for (int i = 0; i < 2; ++i) wg::mbar_init(ufull(i), 1), wg::mbar_init(uempty(i), 8);
        if constexpr (kTma)
            for (int i = 0; i < kConv * 4 * kRing; ++i) wg::mbar_init(bar0 + kRawBar + uint32_t(i) * 8, 1);
        wg::fence_mbar_init_cluster();
    }
    __syncthreads();
    const int64_t chunks = io.K / kChunk, groups = io.n_out / kRows;
    const int64_t n_units = int64_t(*plan.n_active) * groups;

    if (warp >= 8) {
        // ---- conversion: thread t of converting warpgroup cw owns weight row t of the tile, in chunks
        // c % kConv == cw ----
        if constexpr (kConv > 1) wg::setmaxnreg_dec<kConvRegs>();
        const int t = (tid - 256) % 128, cw = (tid - 256) / 128;
        const int sw =
            (t >> 1) & 3;  // raw row t's 16-byte unit i at i ^ sw (conflict-free reads a row a thread)
        uint8_t* const my_raw = rings + int64_t(cw) * kRing * kRawBytes + t * 64;
        // kTma: this warp's barrier of ring slot i, and the warp's chunks so far (their slots and phases)
        const int cwarp = t >> 5;
        const uint32_t my_rbar = bar0 + kRawBar + uint32_t((cw * 4 + cwarp) * kRing) * 8;
        auto raw_full = [&](uint32_t i) { return my_rbar + i * 8; };
        uint32_t islot = 0, rslot = 0, rphase = 0;  // the next box's slot; the next read's slot and phase
        // the stages' chunk count, the same in every converting warpgroup (32-bit: a block's chunks a launch
        // are far fewer than 2^31, and the stage's modulo is then a few instructions, not a 64-bit division)
        uint32_t it = 0;
        for (int64_t ui = 0;; ++ui) {
            const int slot = int(ui & 1);
            // units in the order blocks ask for them (a block that drew a long unit takes fewer): the routed
            // layers' experts differ in pairs, and a fixed share of units a block left some SMs the longer
            if (tid == 256) next_u[slot] = atomicAdd(plan.work + (io.up ? 0 : 1), 1);
            wg::named_sync(3, 128 * kConv);
            const int64_t u = next_u[slot];
            if (u >= n_units) {
                if (tid == 256) {
                    wg::mbar_wait(uempty(slot), uint32_t(((ui >> 1) & 1) ^ 1));
                    uinfo[slot] = UnitInfo{-1, 0, 0, 0};
                    wg::mbar_arrive(ufull(slot));
                }
                break;
            }
            const int a = int(u / groups);
            const int32_t b0 = plan.begin[a], cnt = plan.begin[a + 1] - b0, pb = io.pbegin[a];
            const int e = plan.expert[a];
            if (tid == 256) {
                wg::mbar_wait(uempty(slot), uint32_t(((ui >> 1) & 1) ^ 1));
                // seen by the multiplying warps once the slot's barrier completes
                uinfo[slot] = UnitInfo{e, b0, cnt, int32_t(u % groups)};
                wg::mbar_arrive(ufull(slot));
            }
            const int64_t tile0 = (u % groups) * kRows;
            // kSwi: tile row t is W1's (t / 8 even) or W3's row of h's column 64 tile + 8 (t / 16) + t % 8
            const int m = kSwi ? (t >> 3) & 1 : io.up ? (tile0 < p.I ? 0 : 1) : 2;
            const WeightRef& wr = p.table[3 * e + m];
            const int64_t row =
                kSwi ? (u % groups) * (kRows / 2) + 8 * (t >> 4) + (t & 7) : tile0 - (m == 1 ? p.I : 0) + t;
            const uint8_t* wrow = static_cast<const uint8_t*>(wr.data) + row * wr.ld;
            const uint8_t* srow = static_cast<const uint8_t*>(wr.scale) + row * wr.ld_scale;
            int row_max = 0;
            if constexpr (kRowBase) {
                uint32_t m4 = 0;
                for (int64_t c = 0; c < chunks; c += 4) {  // 16-byte scale rows (bulk_applies)
                    const uint4 v = __ldg(reinterpret_cast<const uint4*>(srow + 4 * c));
                    m4 = __vmaxu4(__vmaxu4(m4, __vmaxu4(v.x, v.y)), __vmaxu4(v.z, v.w));
                }
                row_max = max_byte(m4);
            }
            // this warpgroup's j-th chunk of a tile, c = cw + kConv j, into ring slot j % kRing (kTma: the
            // ring's slots in turn across tiles and units, the warp's 32 rows by its lane 0)
            const uint8_t* const map =
                kTma ? static_cast<const uint8_t*>(p.maps) + (3 * e + m) * 128 : nullptr;
            auto issue_raw = [&](int j) {
                const int c = cw + kConv * j;
                if constexpr (kTma) {
                    if (lane == 0)
                        raw_box(
                            wg::smem_addr(rings + (cw * kRing + int(islot)) * kRawBytes + cwarp * 32 * 64),
                            map, c * 64, int32_t(row - t + 32 * cwarp), raw_full(islot));
                    islot = islot + 1 == kRing ? 0 : islot + 1;
                } else {
                    const uint32_t dst = wg::smem_addr(my_raw + (j % kRing) * kRawBytes);
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        wg::cp_async16(dst + ((i ^ sw) * 16), wrow + c * 64 + i * 16, true);
                }
            };
            const int own = int((chunks - cw + kConv - 1) / kConv);  // this warpgroup's chunks of a tile
            for (int i0 = 0; i0 < cnt; i0 += kN, it += uint32_t(chunks)) {
#pragma unroll
                for (int j = 0; j < kRing - 1; ++j) {
                    if (j < own) issue_raw(j);
                    if constexpr (!kTma) wg::cp_async_commit();
                }
                for (int j = 0; j < own; ++j) {
                    const int c = cw + kConv * j;
                    const uint32_t ic = it + uint32_t(c);  // ic: the chunk's place in the stages
                    if (j + kRing - 1 < own) issue_raw(j + kRing - 1);
                    if constexpr (!kTma) wg::cp_async_commit();
                    const uint32_t s4 = __ldg(reinterpret_cast<const uint32_t*>(srow + 4 * c));
                    const uint32_t s = ic % kStages;
                    wg::mbar_wait(empty(s), ((ic / kStages) & 1u) ^ 1u);
                    if (t == 0) {
                        wg::mbar_arrive_expect_tx(full(s), kTokBytes + kN * 4);
                        const int64_t r0 = pb + i0;  // the token tile's first tiled row
                        wg::bulk_copy_g2s(tok_at(s), io.act + (int64_t(c) * io.rows + r0) * kChunk, kTokBytes,
                                          full(s));
                        wg::bulk_copy_g2s(wg::smem_addr(tsc(s)), io.sc + int64_t(c) * io.rows + r0, kN * 4,
                                          full(s));
                    }
                    const uint32_t slot = kTma ? rslot : uint32_t(j % kRing);
                    if constexpr (kTma) {
                        raw_wait(raw_full(slot), rphase);  // the warp's box
                        if (++rslot == kRing) rslot = 0, rphase ^= 1u;
                    } else {
                        wg::cp_async_wait<kRing - 1>();  // this thread's copies of chunk c landed
                    }
                    const uint8_t* raw = my_raw + slot * kRawBytes;
                    uint4 r[4];
#pragma unroll
                    for (int i = 0; i < 4; ++i) r[i] = *reinterpret_cast<const uint4*>(raw + ((i ^ sw) * 16));
                    const int bmax = kRowBase ? row_max : max_byte(s4);
                    rfs(s)[t] = fold_factor(bmax);
                    chunk_row_to_tile(r, s4, bmax, base + s * kStageBytes + kTokBytes + t * 128, t);
                    wg::fence_proxy_async();  // the A tile's bytes, for the wgmmas' proxy
                    __syncwarp();
                    if (lane == 0) wg::mbar_arrive(full(s));
                }
                if constexpr (!kTma) wg::cp_async_wait<0>();  // the tile's (empty) trailing groups
            }
        }
        return;
    }
    // ---- products: warpgroup h multiplies rows 64 h .. 64 h + 63 of the tile ----
    if constexpr (kConv > 1) wg::setmaxnreg_inc<kMulRegs>();
    const int h = warp >> 2, wq = warp & 3, g = lane >> 2, q = lane & 3, ct = tid & 127;
    const int rloc = 64 * h + 16 * wq + g;  // this thread's rows: rloc, rloc + 8
    float acc[kN / 2], part[kN / 2];
    // the stages' descriptors: stage 0's plus the stage's offset and k-step's 32 bytes, in 16-byte units
    // (every address is below 2^18, so the 14-bit field never carries)
    const uint64_t da0 = wg::desc_k_major_sw128(a_at(0) + h * 8192), db0 = wg::desc_k_major_sw128(tok_at(0));
    int stage = 0;  // the next chunk's stage and its barriers' phase
    uint32_t phase = 0;
    for (int64_t ui = 0;; ++ui) {
        const int slot = int(ui & 1);
        wg::mbar_wait(ufull(slot), uint32_t((ui >> 1) & 1));
        const UnitInfo inf = uinfo[slot];
        if (inf.e < 0) break;
        const int64_t tile0 = int64_t(inf.group) * kRows;
        for (int i0 = 0; i0 < inf.cnt; i0 += kN) {
            const int32_t my_pair = io.up ? 0 : (i0 + ct < inf.cnt ? plan.pairs[inf.b0 + i0 + ct] : -1);
#pragma unroll
            for (int v = 0; v < kN / 2; ++v) acc[v] = 0.0f;
            float f0 = 1.0f, f1 = 1.0f;  // kRowBase: the rows' fold factors, applied once at the end
            // the tile's chunks by wgmma n NT (io.narrow: n64 / n96 where its pairs fit; acc's columns past
            // them stay zero and are not stored), a loop a width so that no k-step branches on it
            if constexpr (kRowBase) {
                auto chunk_loop = [&](auto width) {
                    constexpr int NT = decltype(width)::value;
                    float(&a_n)[NT / 2] = reinterpret_cast<float(&)[NT / 2]>(acc);
                    float(&p_n)[NT / 2] = reinterpret_cast<float(&)[NT / 2]>(part);
                    for (int64_t c = 0; c < chunks; ++c) {
                        wg::mbar_wait(full(uint32_t(stage)), phase);
                        wg::fence();
                        const uint64_t off = uint64_t(uint32_t(stage) * uint32_t(kStageBytes >> 4));
#pragma unroll
                        for (int k = 0; k < 4; ++k)
                            mma_e4m3_ss<NT>(p_n, da0 + off + 2 * k, db0 + off + 2 * k, k);
                        wg::commit();
                        wg::wait<0>();
                        wg::keep(p_n);
                        f0 = rfs(stage)[rloc], f1 = rfs(stage)[rloc + 8];  // the rows' fold factors
                        promote_chunk<NT, true>(a_n, p_n, tsc(stage), q, f0, f1);
                        __syncwarp();
                        if (lane == 0) wg::mbar_arrive(empty(stage));
                        if (++stage == kStages) stage = 0, phase ^= 1u;
                    }
                };
                const int left = inf.cnt - i0;
                if (!io.narrow || left > 96)
                    chunk_loop(std::integral_constant<int, 128>{});
                else if (left > 64)
                    chunk_loop(std::integral_constant<int, 96>{});
                else
                    chunk_loop(std::integral_constant<int, 64>{});
            } else {  // one loop over the widths: a loop a width made ptxas serialise this form's wgmmas
                      // (C7511)
                const int nt = !io.narrow || inf.cnt - i0 > 96 ? 128 : inf.cnt - i0 > 64 ? 96 : 64;
                for (int64_t c = 0; c < chunks; ++c) {
                    wg::mbar_wait(full(uint32_t(stage)), phase);
                    wg::fence();
                    const uint64_t off = uint64_t(uint32_t(stage) * uint32_t(kStageBytes >> 4));
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        const uint64_t da = da0 + off + 2 * k, db = db0 + off + 2 * k;
                        if (nt == 128)
                            wg::mma_m64n128k32_e4m3_ss(part, da, db, k);
                        else if (nt == 96)
                            wg::mma_m64n96k32_e4m3_ss(reinterpret_cast<float(&)[48]>(part), da, db, k);
                        else
                            wg::mma_m64n64k32_e4m3_ss(reinterpret_cast<float(&)[32]>(part), da, db, k);
                    }
                    wg::commit();
                    wg::wait<0>();
                    wg::keep(part);
                    const float* ts = tsc(stage);
                    const float rf0 = rfs(stage)[rloc], rf1 = rfs(stage)[rloc + 8];
                    if (nt == 128)
                        promote_chunk<kN, false>(acc, part, ts, q, rf0, rf1);
                    else if (nt == 96)
                        promote_chunk<96, false>(reinterpret_cast<float(&)[48]>(acc),
                                                 reinterpret_cast<const float(&)[48]>(part), ts, q, rf0, rf1);
                    else
                        promote_chunk<64, false>(reinterpret_cast<float(&)[32]>(acc),
                                                 reinterpret_cast<const float(&)[32]>(part), ts, q, rf0, rf1);
                    __syncwarp();
                    if (lane == 0) wg::mbar_arrive(empty(stage));
                    if (++stage == kStages) stage = 0, phase ^= 1u;
                }
            }
            int32_t* const tp = tpairs + h * kN;
            if (!io.up) {
                wg::named_sync(1 + h, 128);  // the previous tile's stores have read tp
                tp[ct] = my_pair;
                wg::named_sync(1 + h, 128);
            }
            // kSwi: rows rloc (W1's) and rloc + 8 (W3's) are h's column 64 group + 8 (rloc / 16) + g
            if constexpr (kSwi) {
                float* const h0 =
                    io.out + inf.b0 * (io.n_out / 2) + (kRows / 2) * inf.group + 8 * (rloc >> 4) + g;
#pragma unroll
                for (int j = 0; j < kN / 8; ++j)
#pragma unroll
                    for (int cc = 0; cc < 2; ++cc) {
                        const int ti = i0 + 8 * j + 2 * q + cc;
                        if (ti < inf.cnt)
                            h0[int64_t(ti) * (io.n_out / 2)] =
                                swiglu_call(acc[4 * j + cc] * f0, acc[4 * j + 2 + cc] * f1, io.limit);
                    }
            } else {
                auto* const out = reinterpret_cast<std::conditional_t<kBf16, __nv_bfloat16, float>*>(io.out);
                store_tile<kN, kRowBase>(acc, f0, f1, i0, inf.cnt, q, [&](int ti) {
                    const int64_t orow = io.up ? int64_t(inf.b0) + ti : int64_t(tp[ti - i0]);
                    return out + orow * io.n_out + tile0 + rloc;
                });
            }
        }
        __syncwarp();
        if (lane == 0) wg::mbar_arrive(uempty(slot));
    }
}

}  // namespace

bool bulk_ss_fits(int conv) { return size_t(smem_bytes(conv, true)) <= smem_optin(); }

template <bool kRowBase, int kConv>
void launch_bulk_ss(const MoeParams& p, const MoePlan& plan, const TiledIo& io, cudaStream_t s) {
    constexpr size_t bytes = size_t(smem_bytes(kConv));
    if constexpr (kRowBase && kConv == 2) {
        if (io.swi_out && io.up) {
            raise_dynamic_smem(moe_w4a8_bulk_ss_kernel<true, 2, true>, bytes);
            moe_w4a8_bulk_ss_kernel<true, 2, true>
                <<<unsigned(sm_count()), threads(2), bytes, s>>>(p, plan, io);
            return;
        }
        // the row-fold two-converter form's options: the fp4 rows by TMA, bf16 outputs, each and both
        auto launch = [&](auto kernel, size_t smem) {
            raise_dynamic_smem(kernel, smem);
            kernel<<<unsigned(sm_count()), threads(2), smem, s>>>(p, plan, io);
        };
        constexpr size_t tma_bytes = size_t(smem_bytes(2, true));
        const bool tma = io.tma && p.maps != nullptr;
        if (tma && io.bf16_out) return launch(moe_w4a8_bulk_ss_kernel<true, 2, false, true, true>, tma_bytes);
        if (tma) return launch(moe_w4a8_bulk_ss_kernel<true, 2, false, true>, tma_bytes);
        if (io.bf16_out) return launch(moe_w4a8_bulk_ss_kernel<true, 2, false, false, true>, bytes);
    }
    raise_dynamic_smem(moe_w4a8_bulk_ss_kernel<kRowBase, kConv>, bytes);
    moe_w4a8_bulk_ss_kernel<kRowBase, kConv><<<unsigned(sm_count()), threads(kConv), bytes, s>>>(p, plan, io);
}

template void launch_bulk_ss<true, 1>(const MoeParams&, const MoePlan&, const TiledIo&, cudaStream_t);
template void launch_bulk_ss<false, 1>(const MoeParams&, const MoePlan&, const TiledIo&, cudaStream_t);
template void launch_bulk_ss<true, 2>(const MoeParams&, const MoePlan&, const TiledIo&, cudaStream_t);
template void launch_bulk_ss<false, 2>(const MoeParams&, const MoePlan&, const TiledIo&, cudaStream_t);

}  // namespace di::cuda::w4a8
