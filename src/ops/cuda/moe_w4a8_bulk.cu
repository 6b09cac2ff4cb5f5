// Routed experts of a prefill as W4A8 with the token rows in tile order, every copy a bulk copy and a
// cluster's blocks sharing each token tile (the same operands, products and sums as moe_w4a8_kernel's
// 128-token tiles with two warpgroups, moe_w4a8.cu, so the same bits). What it changes against that kernel,
// whose copies alone took ~2,000 of an up launch's ~2,600 us (docs/benchmarks.md):
//   - the token rows come in tile order: a pass first copies each pair's e4m3 row (up: its token's; down:
//     its h row, written there by the SwiGLU quantiser) to [chunk][tiled row][128 bytes] with the 128-byte
//     swizzle applied, each expert's rows from an 8-row boundary; a tile's chunk is then one contiguous 16 KB
//     (the wgmma B operand's layout as it lies), its scales 512 bytes: two bulk copies instead of 1,024
//     cp.async of 16 bytes and their addressing;
//   - the blocks of a cluster (kCs of them) take neighbouring 128-row weight tiles of the same expert and the
//     same token tiles: each copies 1 / kCs of a token tile and multicasts it to all, so the L2 serves each
//     token tile once a cluster instead of once a block;
//   - one warp copies (the weight rows and, once a unit, their scales by cp.async: bulk copies of 64 bytes a
//     row took ~40 ns each); two warpgroups convert and multiply as moe_w4a8_kernel does (A from registers,
//     chunk c + 1 converted while chunk c's wgmmas run, every chunk promoted), each its own 64 rows, paced by
//     mbarriers rather than a block barrier a chunk, so one's promotion overlaps the other's wgmmas.
// Persistent: a cluster walks (active expert, kCs x 128-row group) units, each unit's token tiles, each
// tile's chunks; the copying warp runs up to `stages` chunks ahead, across units.
// Measured (H100, 2026-12-06, docs/benchmarks.md): the same bits as the default, but not faster: the 4-layer
// 4K prefill's MoE 18.8 ms against 17.3 alone (kCs = 1), slower in clusters (4K prefill 83.7k tokens/s with
// kCs = 2, 61.7k with 4, against 107k): so the copies are not what bounds the default kernel. Off
// (DEEPINFER_W4A8_BULK).

#include <algorithm>

#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/moe_w4a8.cuh"
#include "ops/cuda/smem_limit.h"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda::w4a8 {
namespace {

using mma::kChunk;
using mma::word_of;

constexpr int kRows = 128, kN = 128;  // weight rows and token rows of a tile
// Two multiplying warpgroups, then one whose first warp copies: registers are given to warpgroups (an SM's 64
// K over 384 threads caps a thread at 168, under what the multiplying warps hold), so the copying warpgroup
// gives back all but 48 a thread and the multiplying ones take 224 (setmaxnreg; an increase waits for
// registers that a decrease gave back: 128 x 120 >= 256 x 56).
constexpr int kThreads = 384;
constexpr int kCopyRegs = 48, kMulRegs = 224;
static_assert(128 * (168 - kCopyRegs) >= 256 * (kMulRegs - 168));
constexpr int kTokBytes = kN * kChunk;       // a chunk's token tile, swizzled
constexpr int kWBytes = kRows * kChunk / 2;  // its weight rows' fp4 bytes, 64 a row
constexpr int kTScBytes = kN * 4;            // its token rows' scales
constexpr int kStageBytes = (kTokBytes + kWBytes + kTScBytes + 1023) / 1024 * 1024;
constexpr int kMaxStages = 8, kMinStages = 3;

struct UnitInfo {
    int32_t e, b0, cnt, pb;  // expert, first plan index, pairs, first tiled row; e < 0: the walk's end
};

// A unit slot's row of weight scales: the row's chunk words, padded by 16 bytes so that a warp's 8 rows lie 4
// banks apart.
__host__ __device__ constexpr int64_t usc_row_bytes(int64_t chunks) { return chunks * 4 + 16; }
__host__ __device__ constexpr int64_t smem_bytes(int stages, int64_t chunks) {
    return 1024 + int64_t(stages) * kStageBytes + 2 * kRows * usc_row_bytes(chunks) + 2 * sizeof(UnitInfo) +
           2 * kN * 4 + 8 * (2 * stages + 4);
}

// kCs blocks a cluster; kRowBase as moe_w4a8_kernel's. grid: whole clusters, one block an SM.
template <int kCs, bool kRowBase>
__global__ void __cluster_dims__(kCs, 1, 1) __launch_bounds__(kThreads, 1)
    moe_w4a8_bulk_kernel(MoeParams p, MoePlan plan, TiledIo io, int stages) {
    allow_early_next();
    extern __shared__ __align__(128) uint8_t smem[];
    const uint32_t s0 = (wg::smem_addr(smem) + 1023u) & ~1023u;  // the swizzle's 1024-byte alignment
    uint8_t* const base = smem + (s0 - wg::smem_addr(smem));
    const int64_t chunks = io.K / kChunk, usc_row = usc_row_bytes(chunks);
    uint8_t* const ubase = base + int64_t(stages) * kStageBytes;  // two unit slots of weight scales
    auto* const uinfo = reinterpret_cast<UnitInfo*>(ubase + 2 * kRows * usc_row);
    int32_t* const tpairs = reinterpret_cast<int32_t*>(uinfo + 2);  // [warpgroup][kN]: down's store rows
    const uint32_t bar0 = wg::smem_addr(tpairs + 2 * kN);
    auto full = [&](int64_t s) { return bar0 + uint32_t(s) * 8; };                 // 33 arrivals + the bytes
    auto empty = [&](int64_t s) { return bar0 + uint32_t(stages + s) * 8; };       // 8 warps x kCs blocks
    auto ufull = [&](int i) { return bar0 + uint32_t(2 * stages + i) * 8; };       // 33 arrivals
    auto uempty = [&](int i) { return bar0 + uint32_t(2 * stages + 2 + i) * 8; };  // 8 warps
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const uint32_t rank = kCs > 1 ? wg::cluster_rank() : 0;
    if (tid == 0) {
        // full: the copier's lane 0 (with the bulk copies' bytes) and its 32 lanes' cp.async arrivals
        for (int s = 0; s < stages; ++s) wg::mbar_init(full(s), 33), wg::mbar_init(empty(s), 8 * kCs);
        for (int i = 0; i < 2; ++i) wg::mbar_init(ufull(i), 33), wg::mbar_init(uempty(i), 8);
        wg::fence_mbar_init_cluster();
    }
    if constexpr (kCs > 1) {
        wg::cluster_sync();  // every block's barriers exist before any multicast or remote arrival
    } else {
        __syncthreads();
    }
    const int64_t groups = io.n_out / (kRows * kCs);  // units an active expert
    const int64_t n_units = int64_t(*plan.n_active) * groups;
    const int64_t cluster = blockIdx.x / kCs, n_clusters = gridDim.x / kCs;
    auto tile0_of = [&](int64_t u) { return ((u % groups) * kCs + rank) * kRows; };

    if (warp >= 8) {
        wg::setmaxnreg_dec<kCopyRegs>();
    }
    if (warp == 8) {
        // ---- copies: lane 0 the token tile's share and the barriers' bytes, every lane 4 weight rows ----
        int64_t it = 0;
        for (int64_t u = cluster, ui = 0;; u += n_clusters, ++ui) {
            const int slot = int(ui & 1);
            wg::mbar_wait(uempty(slot), uint32_t(((ui >> 1) & 1) ^ 1));
            if (u >= n_units) {
                if (lane == 0) {
                    uinfo[slot] = UnitInfo{-1, 0, 0, 0};
                    wg::mbar_arrive(ufull(slot));
                }
                wg::cp_async_arrive_noinc(ufull(slot));  // the lanes' arrivals (no copies pending)
                break;
            }
            const int a = int(u / groups);
            const int32_t b0 = plan.begin[a];
            const UnitInfo inf{plan.expert[a], b0, plan.begin[a + 1] - b0, io.pbegin[a]};
            const int64_t tile0 = tile0_of(u);
            const int m = io.up ? (tile0 < p.I ? 0 : 1) : 2;
            const WeightRef& wr = p.table[3 * inf.e + m];
            const int64_t r0 = tile0 - (m == 1 ? p.I : 0), ld = wr.ld;
            const uint8_t* wd = static_cast<const uint8_t*>(wr.data) + r0 * ld;
            const uint8_t* ws = static_cast<const uint8_t*>(wr.scale) + r0 * wr.ld_scale;
            if (lane == 0) {
                uinfo[slot] = inf;  // seen by the consumers once the slot's barrier completes
                wg::mbar_arrive(ufull(slot));
            }
            const uint32_t us = wg::smem_addr(ubase) + uint32_t(slot * kRows * usc_row);
            const int64_t units = chunks / 4;  // 16-byte units a scale row
            for (int64_t e = lane; e < kRows * units; e += 32) {
                const int64_t r = e / units, j = e % units;
                wg::cp_async16(us + uint32_t(r * usc_row + j * 16), ws + r * wr.ld_scale + j * 16, true);
            }
            wg::cp_async_arrive_noinc(ufull(slot));
            for (int i0 = 0; i0 < inf.cnt; i0 += kN)
                for (int64_t c = 0; c < chunks; ++c, ++it) {
                    const int64_t s = it % stages;
                    wg::mbar_wait(empty(s), uint32_t(((it / stages) & 1) ^ 1));
                    const uint32_t st = s0 + uint32_t(s) * kStageBytes;
                    if (lane == 0 && (io.probe & 16)) wg::mbar_arrive(full(s));
                    if (lane == 0 && !(io.probe & 16)) {
                        wg::mbar_arrive_expect_tx(full(s), kTokBytes + kTScBytes);
                        // this block's share of the token tile's rows and scales, to every block
                        const int64_t row = inf.pb + i0 + rank * (kN / kCs);
                        const uint8_t* src = io.act + (c * io.rows + row) * kChunk;
                        const float* ssrc = io.sc + c * io.rows + row;
                        const uint32_t tdst = st + rank * (kTokBytes / kCs);
                        const uint32_t sdst = st + kTokBytes + kWBytes + rank * (kTScBytes / kCs);
                        if constexpr (kCs > 1) {
                            const uint16_t mask = uint16_t((1u << kCs) - 1);
                            wg::bulk_copy_g2s_multicast(tdst, src, kTokBytes / kCs, full(s), mask);
                            wg::bulk_copy_g2s_multicast(sdst, ssrc, kTScBytes / kCs, full(s), mask);
                        } else {
                            wg::bulk_copy_g2s(tdst, src, kTokBytes, full(s));
                            wg::bulk_copy_g2s(sdst, ssrc, kTScBytes, full(s));
                        }
                    }
                    // the weight rows by cp.async (bulk copies of 64 bytes a row took ~40 ns each, 4x slower
                    // in all): lane l the 16-byte unit l % 4 of rows l / 4 + 8 i
                    const uint8_t* wsrc = wd + (lane >> 2) * ld + c * 64 + (lane & 3) * 16;
                    const uint32_t wdst = st + kTokBytes + uint32_t((lane >> 2) * 64 + (lane & 3) * 16);
#pragma unroll
                    for (int i = 0; i < kRows / 8; ++i)
                        if (!(io.probe & 8)) wg::cp_async16(wdst + i * 8 * 64, wsrc + i * 8 * ld, true);
                    wg::cp_async_arrive_noinc(full(s));
                }
        }
    } else if (warp < 8) {
        wg::setmaxnreg_inc<kMulRegs>();
        // ---- products: warpgroup h multiplies rows 64 h .. 64 h + 63 of the block's tile ----
        const int h = warp >> 2, wq = warp & 3, g = lane >> 2, q = lane & 3, ct = tid & 127;
        const int rloc = 64 * h + 16 * wq + g;  // this thread's rows: rloc, rloc + 8
        float acc[kN / 2], part[kN / 2];
        uint32_t af_a[4][4], af_b[4][4];
        float rf_a[2], rf_b[2];
        int64_t it = 0;
        for (int64_t u = cluster, ui = 0;; u += n_clusters, ++ui) {
            const int slot = int(ui & 1);
            wg::mbar_wait(ufull(slot), uint32_t((ui >> 1) & 1));
            const UnitInfo inf = uinfo[slot];
            if (inf.e < 0) break;
            const uint8_t* srow[2] = {ubase + slot * kRows * usc_row + rloc * usc_row,
                                      ubase + slot * kRows * usc_row + (rloc + 8) * usc_row};
            int row_max[2] = {0, 0};  // kRowBase: the rows' largest scale bytes
            if constexpr (kRowBase) {
#pragma unroll
                for (int r = 0; r < 2; ++r) row_max[r] = row_scale_max(srow[r], chunks, q);
            }
            const int64_t tile0 = tile0_of(u);
            auto convert = [&](int64_t s, int64_t c, uint32_t(&af)[4][4], float(&rf)[2]) {
                const uint8_t* wsm = base + s * kStageBytes + kTokBytes;
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const uint4 raw = *reinterpret_cast<const uint4*>(wsm + (rloc + 8 * r) * 64 + q * 16);
                    const uint32_t s4 = *reinterpret_cast<const uint32_t*>(srow[r] + 4 * c);
                    const int bmax = kRowBase ? row_max[r] : max_byte(s4);
                    rf[r] = fold_factor(bmax);
                    if (io.probe & 1) {  // timing only: the raw words as they are
#pragma unroll
                        for (int k = 0; k < 4; ++k) af[k][r] = af[k][2 + r] = word_of(raw, k);
                    } else {
                        chunk_frags(raw, s4, bmax, q, af, r);
                    }
                }
            };
            // part[4j + v]: row g + 8 (v >> 1) of the warp's 16, token column 8j + 2q + (v & 1)
            auto promote = [&](int64_t s, const float(&rf)[2]) {
                if (io.probe & 2) return;
                const float* ts =
                    reinterpret_cast<const float*>(base + s * kStageBytes + kTokBytes + kWBytes);
                promote_chunk<kN, kRowBase>(acc, part, ts, q, rf[0], rf[1]);
            };
            auto release =
                [&](int64_t s) {  // this warp is done with stage s: every block's copier may refill
                    __syncwarp();
                    if (lane < kCs) {
                        if constexpr (kCs > 1) {
                            wg::mbar_arrive_cluster(empty(s), uint32_t(lane));
                        } else {
                            wg::mbar_arrive(empty(s));
                        }
                    }
                };
            // chunk c (stage s): its wgmmas on af, then chunk c + 1 converted into af_next while they run,
            // then c promoted and its stage released
            auto step = [&](int64_t c, uint32_t(&af)[4][4], const float(&rf)[2], uint32_t(&af_next)[4][4],
                            float(&rf_next)[2]) {
                const int64_t s = (it + c) % stages;
                const uint32_t st = s0 + uint32_t(s) * kStageBytes;
                if (!(io.probe & 4)) {
                    wg::fence();
#pragma unroll
                    for (int k = 0; k < 4; ++k)
                        wg::mma_m64n128k32_e4m3(part, af[k], wg::desc_k_major_sw128(st + k * 32), k);
                    wg::commit();
                }
                if (c + 1 < chunks) {
                    const int64_t sn = (it + c + 1) % stages;
                    wg::mbar_wait(full(sn), uint32_t(((it + c + 1) / stages) & 1));
                    convert(sn, c + 1, af_next, rf_next);
                }
                wg::wait<0>();
                keep_chunk<kN>(part, af);
                promote(s, rf);
                release(s);
            };
            for (int i0 = 0; i0 < inf.cnt; i0 += kN) {
                // down's store rows: loaded now, staged at the tile's end
                const int32_t my_pair = io.up ? 0 : (i0 + ct < inf.cnt ? plan.pairs[inf.b0 + i0 + ct] : -1);
#pragma unroll
                for (int v = 0; v < kN / 2; ++v) acc[v] = 0.0f;
                {
                    const int64_t s = it % stages;
                    wg::mbar_wait(full(s), uint32_t((it / stages) & 1));
                    convert(s, 0, af_a, rf_a);
                }
#pragma unroll 1
                for (int64_t c = 0; c < chunks; c += 2) {
                    step(c, af_a, rf_a, af_b, rf_b);
                    if (c + 1 < chunks) step(c + 1, af_b, rf_b, af_a, rf_a);
                }
                it += chunks;
                int32_t* const tp = tpairs + h * kN;
                if (!io.up) {
                    wg::named_sync(1 + h, 128);  // the previous tile's stores have read tp
                    tp[ct] = my_pair;
                    wg::named_sync(1 + h, 128);
                }
                // kRowBase: the rows' factors, applied once (row max >= 7: e4m3_fold_kernel)
                if (!(io.probe & 32))
                    store_tile<kN, kRowBase>(
                        acc, kRowBase ? fold_factor(row_max[0]) : 1.0f,
                        kRowBase ? fold_factor(row_max[1]) : 1.0f, i0, inf.cnt, q, [&](int ti) {
                            const int64_t orow = io.up ? int64_t(inf.b0) + ti : int64_t(tp[ti - i0]);
                            return io.out + orow * io.n_out + tile0 + rloc;
                        });
            }
            __syncwarp();
            if (lane == 0) wg::mbar_arrive(uempty(slot));  // the unit's scales are read
        }
    }
    if constexpr (kCs > 1) {
        wg::cluster_sync();  // no block leaves while another may still arrive on its barriers
    }
}

// Token rows in tile order: active expert a's pairs at tiled rows pb(a) .. pb(a) + cnt - 1, pb(a) the sum of
// the earlier experts' counts rounded up to 8. grid (max active, 8), 256 threads: a warp a row (rows spread
// over the y blocks' warps), a lane every 32nd 16-byte unit of it (a grid-stride loop over (row, unit) with a
// 64-bit division and remainder per unit took ~165 us a layer at 4K). up: pair rows from their tokens'
// quantised rows (xq [n, chunks, 128], xs [n, chunks]); the tiled rows' numbers of the plan's pairs (prow)
// and the experts' first rows (pbegin).
// A lane loads kLoads 16-byte units before it stores the first (the stores may alias the loads for the
// compiler, which keeps one load in flight a lane otherwise; H100, 4 V4-Flash layers: the 4K prefill +1.0%
// against one at a time, docs/benchmarks.md 2026-12-07, eighth session).
__global__ void __launch_bounds__(256) tile_rows_kernel(MoePlan plan, int32_t k, const uint8_t* xq,
                                                        const float* xs, int64_t chunks, TiledOut t) {
    allow_early_next();
    const int a = blockIdx.x;
    if (a >= *plan.n_active) return;
    __shared__ int warp_sums[8];
    int part = 0;
    for (int i = threadIdx.x; i < a; i += 256) part += (plan.begin[i + 1] - plan.begin[i] + 7) & ~7;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = part;
    __syncthreads();
    int pb = 0;
#pragma unroll
    for (int w = 0; w < 8; ++w) pb += warp_sums[w];
    const int32_t b0 = plan.begin[a], cnt = plan.begin[a + 1] - b0;
    if (blockIdx.y == 0 && threadIdx.x == 0) t.pbegin[a] = pb;
    const int lane = threadIdx.x & 31, units = int(chunks) * 8;
    const int warps = int(gridDim.y) * 8;
    for (int i = int(blockIdx.y) * 8 + (threadIdx.x >> 5); i < cnt; i += warps) {
        const int32_t r = pb + i;
        const int64_t tok = plan.pairs[b0 + i] / k;
        const uint8_t* src = xq + tok * chunks * kChunk;
        constexpr int kLoads = 4;
        for (int v0 = lane; v0 < units; v0 += 32 * kLoads) {
            uint4 u[kLoads];
            float sc[kLoads];
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
                const int v = v0 + 32 * j;
                if (v < units) {
                    u[j] = *reinterpret_cast<const uint4*>(src + int64_t(v) * 16);
                    sc[j] = (v & 7) == 0 ? xs[tok * chunks + (v >> 3)] : 0.0f;
                }
            }
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
                const int v = v0 + 32 * j;
                if (v >= units) break;
                const int64_t c = v >> 3;
                const int uo = v & 7;
                *reinterpret_cast<uint4*>(t.act + (c * t.rows + r) * kChunk + ((uo ^ (r & 7)) << 4)) = u[j];
                if (uo == 0) t.sc[c * t.rows + r] = sc[j];
            }
        }
        if (lane == 0) t.prow[b0 + i] = r;
    }
}

}  // namespace

bool bulk_fits(int64_t K) { return size_t(smem_bytes(kMinStages, K / kChunk)) <= smem_optin(); }

int bulk_cluster(int64_t n_out, int want) {
    for (int cs = want; cs > 1; cs /= 2)
        if (n_out % (kRows * cs) == 0) return cs;
    return 1;
}

void launch_tile_rows(const MoePlan& plan, int32_t k, const uint8_t* xq, const float* xs, int64_t chunks,
                      const TiledOut& t, unsigned slots, cudaStream_t s) {
    tile_rows_kernel<<<dim3(slots, 8), 256, 0, s>>>(plan, k, xq, xs, chunks, t);
}

template <int kCs, bool kRowBase>
void launch_bulk_cs(const MoeParams& p, const MoePlan& plan, const TiledIo& io, cudaStream_t s) {
    const int64_t chunks = io.K / kChunk;
    int stages = kMaxStages;
    while (stages > kMinStages && size_t(smem_bytes(stages, chunks)) > smem_optin()) --stages;
    const size_t smem = size_t(smem_bytes(stages, chunks));
    raise_dynamic_smem(moe_w4a8_bulk_kernel<kCs, kRowBase>, smem);
    const unsigned grid = unsigned(sm_count() / kCs * kCs);
    moe_w4a8_bulk_kernel<kCs, kRowBase><<<grid, kThreads, smem, s>>>(p, plan, io, stages);
}

template <bool kRowBase>
void launch_bulk(const MoeParams& p, const MoePlan& plan, const TiledIo& io, int cluster, cudaStream_t s) {
    switch (bulk_cluster(io.n_out, cluster)) {
        case 4:
            return launch_bulk_cs<4, kRowBase>(p, plan, io, s);
        case 2:
            return launch_bulk_cs<2, kRowBase>(p, plan, io, s);
        default:
            return launch_bulk_cs<1, kRowBase>(p, plan, io, s);
    }
}

template void launch_bulk<true>(const MoeParams&, const MoePlan&, const TiledIo&, int, cudaStream_t);
template void launch_bulk<false>(const MoeParams&, const MoePlan&, const TiledIo&, int, cudaStream_t);

}  // namespace di::cuda::w4a8
