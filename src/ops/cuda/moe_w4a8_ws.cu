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
// multiplying warpgroups are done with its chunk; the A tile has two slots.

#include <algorithm>
#include <cstdlib>

#include "ops/cuda/gemv.cuh"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/moe_w4a8.cuh"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda::w4a8 {
namespace {

using mma::kChunk;
using mma::word_of;

constexpr int kRows = 128, kN = 128;  // weight rows and token rows of a tile
constexpr int kThreads = 384;         // warpgroup 0 copies and converts, 1 and 2 multiply
constexpr int kCopySlots = 7, kASlots = 2;
constexpr int kAhead = kCopySlots - 2;  // chunk c's copies go out while chunk c - kAhead is converted
// A copy slot: the token tile (e4m3, 128-byte swizzle), raw fp4 rows (64 bytes a row), their group scales,
// the token rows' scales. An A slot: the converted tile (128-byte swizzle), the rows' fold factors.
constexpr int kTokBytes = kN * kChunk, kRawBytes = kRows * kChunk / 2, kRawScBytes = kRows * 4;
constexpr int kCopyBytes = kTokBytes + kRawBytes + kRawScBytes + kN * 4;
constexpr int kABytes = kRows * kChunk, kASlotBytes = (kABytes + kRows * 4 + 1023) / 1024 * 1024;
constexpr int kBarBytes = 8 * (2 * kCopySlots + kASlots);
constexpr int kSmemBytes = 1024 + kCopySlots * kCopyBytes + kASlots * kASlotBytes + kBarBytes;
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
// tile's chunks.
struct Walk {
    int64_t u, c = 0, chunks, row_tiles;
    int i0 = 0, n_active;
    Unit w;
    __device__ Walk(const MoePlan& plan, int64_t chunks_, int64_t row_tiles_, int n_active_)
        : u(blockIdx.x), chunks(chunks_), row_tiles(row_tiles_), n_active(n_active_) {
        w = unit_of(plan, u, row_tiles, n_active);
    }
    // Returns whether the next chunk starts a new tile.
    __device__ bool next(const MoePlan& plan) {
        if (++c < chunks) return false;
        c = 0;
        i0 += kN;
        if (i0 >= w.cnt) {
            i0 = 0;
            u += gridDim.x;
            w = unit_of(plan, u, row_tiles, n_active);
        }
        return true;
    }
};

// The weight row of tile row r: W1's or W3's (up: one row space of 2 I rows) or W2's.
__device__ __forceinline__ const WeightRef& tile_matrix(const MoeParams& p, const W8Io& io, const Unit& w,
                                                        int64_t& row0) {
    const int m = io.up ? (w.tile0 < p.I ? 0 : 1) : 2;
    row0 = w.tile0 - (m == 1 ? p.I : 0);
    return p.table[3 * w.e + m];
}

template <bool kRowBase>
__global__ void __launch_bounds__(kThreads, 1)
    moe_w4a8_ws_kernel(MoeParams p, MoePlan plan, W8Io io, int skip) {
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
    const int64_t chunks = io.K / kChunk, row_tiles = io.n_out / kRows;
    const int n_active = *plan.n_active;
    if (warp < 4) {
        // ---- copies and conversion: thread t owns weight row t of the tile ----
        const int t = tid;
        Walk cp(plan, chunks, row_tiles, n_active), cv = cp;
        // the copy cursor's tile: token rows of units t % 8 (rows t / 8 + 16 i), row t's weights and scales
        int32_t src_row[kN / 16];
        int32_t sc_row = 0;
        const uint8_t* wrow = nullptr;
        const uint8_t* srow = nullptr;
        const int c_unit = t & 7;
        const uint32_t dst0 = uint32_t((t >> 3) * 128 + ((c_unit ^ ((t >> 3) & 7)) * 16));
        auto enter_tile = [&]() {
            if (!cp.w.valid) return;
#pragma unroll
            for (int i = 0; i < kN / 16; ++i) {
                const int r = cp.i0 + 16 * i + (t >> 3);
                src_row[i] = r < cp.w.cnt
                                 ? (io.up ? plan.pairs[cp.w.b0 + r] / int32_t(p.k) : plan.pairs[cp.w.b0 + r])
                                 : -1;
            }
            const int r = cp.i0 + t;
            sc_row = r < cp.w.cnt ? (io.up ? plan.pairs[cp.w.b0 + r] / int32_t(p.k) : plan.pairs[cp.w.b0 + r])
                                  : 0;  // row 0's past the tokens (not read by any product: zero rows)
            int64_t row0;
            const WeightRef& wr = tile_matrix(p, io, cp.w, row0);
            wrow = static_cast<const uint8_t*>(wr.data) + (row0 + t) * wr.ld;
            srow = static_cast<const uint8_t*>(wr.scale) + (row0 + t) * wr.ld_scale;
        };
        const int sw =
            (t >> 1) & 3;  // raw row t's 16-byte unit i at i ^ sw (conflict-free reads a row a thread)
        auto issue = [&](int64_t slot) {
            const uint32_t st = smem0 + uint32_t(slot) * kCopyBytes;
            const int64_t c = cp.c;
#pragma unroll
            for (int i = 0; i < kN / 16; ++i)  // rows past the tokens: zeros (the source mapped, not read)
                if (!(skip & 2))
                    wg::cp_async16(st + dst0 + i * 2048,
                                   io.act + (int64_t(max(src_row[i], 0)) * chunks + c) * kChunk + c_unit * 16,
                                   src_row[i] >= 0);
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (!(skip & 8))
                    wg::cp_async16(st + kTokBytes + t * 64 + ((i ^ sw) * 16), wrow + c * 64 + i * 16, true);
            wg::cp_async4(st + kTokBytes + kRawBytes + t * 4, srow + c * 4);
            wg::cp_async4(st + kTokBytes + kRawBytes + kRawScBytes + t * 4,
                          io.sc + int64_t(sc_row) * chunks + c);
        };
        int64_t it_copy = 0;
        auto copy_next = [&]() {  // one commit group per call, empty past the walk's end
            if (cp.w.valid) {
                const int64_t slot = it_copy % kCopySlots;
                wg::mbar_wait(copy_free(slot), uint32_t(((it_copy / kCopySlots) & 1) ^ 1));
                issue(slot);
                if (cp.next(plan)) enter_tile();
            }
            wg::cp_async_commit();
            ++it_copy;
        };
        enter_tile();
        for (int i = 0; i < kAhead; ++i) copy_next();
        int row_max = 0;  // kRowBase: the largest scale byte of row t (the unit's)
        int64_t last_u = -1;
        for (int64_t it = 0; cv.w.valid; ++it) {
            copy_next();
            if (kRowBase && cv.u != last_u) {
                last_u = cv.u;
                int64_t row0;
                const WeightRef& wr = tile_matrix(p, io, cv.w, row0);
                const uint8_t* r = static_cast<const uint8_t*>(wr.scale) + (row0 + t) * wr.ld_scale;
                uint32_t m4 = 0;
                for (int64_t c = 0; c < chunks; ++c)
                    m4 = __vmaxu4(m4, *reinterpret_cast<const uint32_t*>(r + 4 * c));
                row_max = max(max(int(m4 & 0xffu), int((m4 >> 8) & 0xffu)),
                              max(int((m4 >> 16) & 0xffu), int(m4 >> 24)));
            }
            const int64_t slot = it % kCopySlots, aslot = it % kASlots;
            wg::mbar_wait(a_free(aslot), uint32_t(((it / kASlots) & 1) ^ 1));
            wg::cp_async_wait<kAhead>();  // this thread's copies of chunk it landed
            const uint8_t* raw = base + slot * kCopyBytes + kTokBytes;
            uint4 r[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                r[i] = *reinterpret_cast<const uint4*>(raw + t * 64 + ((i ^ sw) * 16));
            const uint32_t s4 = *reinterpret_cast<const uint32_t*>(raw + kRawBytes + t * 4);
            const int bmax = kRowBase ? row_max
                                      : max(max(int(s4 & 0xffu), int((s4 >> 8) & 0xffu)),
                                            max(int((s4 >> 16) & 0xffu), int(s4 >> 24)));
            uint8_t* at = base + kCopySlots * kCopyBytes + aslot * kASlotBytes;
            reinterpret_cast<float*>(at + kABytes)[t] =
                __int_as_float((bmax - 6) << 23);  // 2^(bmax - 127 - 6)
            if (!(skip & 1)) {
                uint32_t lo[4][4], hi[4][4];  // [group q][word w]
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    uint32_t lut0, lut1;
                    w4a8_lut(int((s4 >> (8 * q)) & 0xffu) - bmax + 6, lut0, lut1);
#pragma unroll
                    for (int w = 0; w < 4; ++w)
                        fp4x8_to_e4m3(word_of(r[q], w), lut0, lut1, lo[q][w], hi[q][w]);
                }
                // w8_index order: bytes 32 w + 4 q .. of the row are lo[q][w], 32 w + 16 + 4 q .. hi[q][w]
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    *reinterpret_cast<uint4*>(at + t * 128 + (((2 * w) ^ (t & 7)) * 16)) =
                        make_uint4(lo[0][w], lo[1][w], lo[2][w], lo[3][w]);
                    *reinterpret_cast<uint4*>(at + t * 128 + (((2 * w + 1) ^ (t & 7)) * 16)) =
                        make_uint4(hi[0][w], hi[1][w], hi[2][w], hi[3][w]);
                }
            }
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
    float acc[kN / 2], part[kN / 2];
    for (int64_t it = 0; cs.w.valid;) {
#pragma unroll
        for (int v = 0; v < kN / 2; ++v) acc[v] = 0.0f;
        float f0 = 1.0f, f1 = 1.0f;  // kRowBase: the rows' fold factors, applied once at the end
        const Unit w = cs.w;
        const int i0 = cs.i0;
        bool tile_end = false;
        for (; !tile_end; ++it) {
            const int64_t slot = it % kCopySlots, aslot = it % kASlots;
            wg::mbar_wait(full(slot), uint32_t((it / kCopySlots) & 1));
            const uint32_t st = smem0 + uint32_t(slot) * kCopyBytes;
            const uint32_t at = a0 + uint32_t(aslot) * kASlotBytes;
            if (!(skip & 4)) {
                wg::fence();
#pragma unroll
                for (int s = 0; s < 4; ++s)
                    wg::mma_m64n128k32_e4m3_ss(part, wg::desc_k_major_sw128(at + h * 8192 + s * 32),
                                               wg::desc_k_major_sw128(st + s * 32), s);
                wg::commit();
                wg::wait<0>();
            }
#pragma unroll
            for (int v = 0; v < kN / 2; ++v) wg::keep(part[v]);
            const float* ts = reinterpret_cast<const float*>(base + slot * kCopyBytes + kTokBytes +
                                                             kRawBytes + kRawScBytes);
            const float* rfs = reinterpret_cast<const float*>(base + kCopySlots * kCopyBytes +
                                                              aslot * kASlotBytes + kABytes);
            const float rf0 = rfs[rloc], rf1 = rfs[rloc + 8];
            if (kRowBase) f0 = rf0, f1 = rf1;
#pragma unroll
            for (int j = 0; j < kN / 8; ++j) {
                const float2 s2 = *reinterpret_cast<const float2*>(ts + 8 * j + 2 * q);
#pragma unroll
                for (int v = 0; v < 4; ++v)
                    acc[4 * j + v] = fmaf(
                        part[4 * j + v], ((v & 1) ? s2.y : s2.x) * (kRowBase ? 1.0f : ((v >> 1) ? rf1 : rf0)),
                        acc[4 * j + v]);
            }
            __syncwarp();
            if (lane == 0) wg::mbar_arrive(copy_free(slot)), wg::mbar_arrive(a_free(aslot));
            tile_end = cs.next(plan);
        }
        int64_t row0;
        (void)tile_matrix(p, io, w, row0);
#pragma unroll
        for (int j = 0; j < kN / 8; ++j)
#pragma unroll
            for (int cc = 0; cc < 2; ++cc) {
                const int ti = i0 + 8 * j + 2 * q + cc;
                if (ti >= w.cnt) continue;
                float* out = io.out + int64_t(plan.pairs[w.b0 + ti]) * io.n_out + w.tile0 + rloc;
                out[0] = kRowBase ? acc[4 * j + cc] * f0 : acc[4 * j + cc];
                out[8] = kRowBase ? acc[4 * j + 2 + cc] * f1 : acc[4 * j + 2 + cc];
            }
    }
}

}  // namespace

template <bool kRowBase>
void launch_ws(const MoeParams& p, const MoePlan& plan, const W8Io& io, unsigned slots, cudaStream_t s) {
    static const bool raised =
        cudaFuncSetAttribute(moe_w4a8_ws_kernel<kRowBase>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kSmemBytes) == cudaSuccess;
    (void)raised;  // a failure shows as the launch's error
    const int64_t units = int64_t(slots) * (io.n_out / kRows);
    const unsigned grid = unsigned(std::min<int64_t>(units, sm_count()));
    static const int skip =
        std::getenv("DEEPINFER_W4A8_WS_SKIP") ? std::atoi(std::getenv("DEEPINFER_W4A8_WS_SKIP")) : 0;
    moe_w4a8_ws_kernel<kRowBase><<<grid, kThreads, kSmemBytes, s>>>(p, plan, io, skip);
}

template void launch_ws<true>(const MoeParams&, const MoePlan&, const W8Io&, unsigned, cudaStream_t);
template void launch_ws<false>(const MoeParams&, const MoePlan&, const W8Io&, unsigned, cudaStream_t);

}  // namespace di::cuda::w4a8
