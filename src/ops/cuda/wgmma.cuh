// Hopper's warpgroup matrix instructions (sm_90a) and the asynchronous copies that feed them, as thin inline
// wrappers: wgmma with A from registers or shared memory and B from shared memory (K-major), cp.async with
// zero fill, mbarriers, and the fences and waits their ordering needs.
#pragma once

#include <cstdint>

namespace di::cuda::wg {

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// 16 bytes global -> shared, bypassing L1; zeros where !valid (src is then not read but must be mapped).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
// 4 bytes global -> shared (through L1).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
// The same with zeros where !valid (src is then not read but must be mapped).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0)
                 : "memory");
}
// An arrival on mbarrier `bar` once this thread's earlier cp.async copies land (the barrier's count includes
// it).
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// `bytes` (a multiple of 16, from a 16-byte aligned src) of global memory into the L2, nothing waiting on it.
__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Shared memory written through the generic proxy (cp.async, st.shared) and read next by wgmma.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// mbarriers in shared memory: a phase completes once `count` arrivals came; a waiter names the parity of the
// phase it waits for (a fresh barrier counts its phase before the first as complete: parity 1 passes at
// once).
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, "
            "p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (done == 0);
}

// The producer's arrival that also announces `bytes` of asynchronous copies completing on the barrier.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared by the copy engine (TMA's bulk
// form: no tensor map), completing as transaction bytes on mbarrier `bar`.
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}
// A box of a 2-D tensor map (a CUtensorMap in global memory, tensor_map.h) at column x, row y -> shared
// memory at dst (laid out and swizzled as the map says), completing as transaction bytes on mbarrier `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int32_t x, int32_t y,
                                            uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
        "%3}], "
        "[%4];\n" ::"r"(dst),
        "l"(map), "r"(x), "r"(y), "r"(bar)
        : "memory");
}

// Thread block clusters: this block's rank in its cluster, a barrier of every thread of the cluster (release
// and acquire: shared-memory writes and mbarrier inits before it are seen by the cluster after it), the
// mbarrier inits made visible to the cluster's other blocks, an arrival on the mbarrier at the same offset in
// block `rank` of the cluster, and the bulk copy whose bytes land at the same offset in every block of `mask`
// (each completing its bytes on that block's mbarrier at `bar`'s offset).
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void fence_mbar_init_cluster() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void bulk_copy_g2s_multicast(uint32_t dst, const void* src, uint32_t bytes,
                                                        uint32_t bar, uint16_t mask) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "h"(mask)
        : "memory");
}

// A warpgroup's registers a thread, lowered or raised (every warp of the warpgroup executes the same one; an
// increase waits until decreases elsewhere in the block gave back as many).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// A barrier of `threads` threads (a multiple of 32) named id (1 .. 15: 0 is __syncthreads').
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// An arrival on named barrier id that does not wait (the barrier's other threads bar.sync on it).
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps a register that an in-flight wgmma reads or writes live and unmoved across this point.
__device__ __forceinline__ void keep(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void keep(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
template <int N>
__device__ __forceinline__ void keep(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) keep(r[i]);
}
template <int N, int M>
__device__ __forceinline__ void keep(uint32_t (&r)[N][M]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < M; ++j) keep(r[i][j]);
}

// Shared-memory descriptor of a K-major operand without swizzle: core matrices of 8 rows x 16 bytes, each
// 128 contiguous bytes; lbo = bytes between the two core matrices along K of one wgmma (k16), sbo = bytes
// between consecutive 8-row groups.
__device__ __forceinline__ uint64_t desc_k_major(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32);
}

// The same with the 128-byte swizzle: rows of 128 bytes (64 f16 of K) at a 128-byte stride, 8-row groups at
// 1024 bytes, the 16-byte unit c of row r stored at c ^ (r % 8), the atom 1024-byte aligned; a k16 step
// inside the rows starts 32 bytes further per step (the swizzle applies to the computed addresses).
__device__ __forceinline__ uint64_t desc_k_major_sw128(uint32_t addr) {
    return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
           (uint64_t(1) << 62);
}

// The accumulator operands of a wgmma with 32, 48 or 64 f32 registers: their names in the instruction (%0 ..)
// and their constraints; the A fragment and the B descriptor follow as %N .. %N + 4 and the scale-d flag as
// %N + 5.
#define DI_WG_D32_NAMES                                                                                     \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define DI_WG_D64_NAMES                                                                                     \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "  \
    "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "  \
    "%62, %63}"
#define DI_WG_D48_NAMES                                                                                \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
    "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "  \
    "%40, %41, %42, %43, %44, %45, %46, %47}"
#define DI_WG_D48(d)                                                                                         \
    DI_WG_D32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), \
        "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),           \
        "+f"(d[46]), "+f"(d[47])
#define DI_WG_D32(d)                                                                                \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
        "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
        "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define DI_WG_D64(d)                                                                                         \
    DI_WG_D32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), \
        "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),           \
        "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]),           \
        "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),           \
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define DI_WG_D128_NAMES                                                                                  \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "    \
    "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "     \
    "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "     \
    "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, "     \
    "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, "     \
    "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, " \
    "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define DI_WG_D128(d) DI_WG_D64(d), DI_WG_D64((d + 64))  // (d + 64)[i]: d[64 + i]

// d[64 x 64] += a[64 x 16] b[16 x 64], f16 inputs, f32 accumulators. a: the warp's 16 rows as mma.sync's
// m16n8k16 A fragment; d: 8-column blocks j of that warp's rows, d[4j + v] = rows (g, g, g + 8, g + 8) x
// columns (8j + 2q, + 1, 8j + 2q, + 1).
__device__ __forceinline__ void mma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " DI_WG_D32_NAMES
        ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : DI_WG_D32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1)
        : "memory");
}

// The same with 128 columns: d[64], the same layout over 16 8-column blocks.
__device__ __forceinline__ void mma_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " DI_WG_D64_NAMES
        ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : DI_WG_D64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1)
        : "memory");
}

// d[64 x 64] (+)= a[64 x 32] b[32 x 64], e4m3 inputs, f32 accumulators; accumulate = 0 overwrites d. a: the
// warp's 16 rows, a[0] = row g, k 4q .. 4q + 3, a[1] = row g + 8, the same k, a[2] and a[3] the same rows at
// k 16 + 4q ..; b: K-major (32 bytes of each row); d as mma_m64n64k16's.
__device__ __forceinline__ void mma_m64n64k32_e4m3(float (&d)[32], const uint32_t (&a)[4], uint64_t b,
                                                   int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " DI_WG_D32_NAMES
        ", {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : DI_WG_D32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate)
        : "memory");
}

// The same with 128 columns: d[64], the layout over 16 8-column blocks.
__device__ __forceinline__ void mma_m64n128k32_e4m3(float (&d)[64], const uint32_t (&a)[4], uint64_t b,
                                                    int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " DI_WG_D64_NAMES
        ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : DI_WG_D64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate)
        : "memory");
}

// The same with A from shared memory too (K-major, a: its descriptor).
__device__ __forceinline__ void mma_m64n128k32_e4m3_ss(float (&d)[64], uint64_t a, uint64_t b,
                                                       int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " DI_WG_D64_NAMES ", %64, %65, p, 1, 1;\n}\n"
        : DI_WG_D64(d)
        : "l"(a), "l"(b), "r"(accumulate)
        : "memory");
}

// The same with 64 and with 96 columns (d[32], d[48]: the first 8-column blocks of the 128-column layout).
__device__ __forceinline__ void mma_m64n64k32_e4m3_ss(float (&d)[32], uint64_t a, uint64_t b,
                                                      int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " DI_WG_D32_NAMES ", %32, %33, p, 1, 1;\n}\n"
        : DI_WG_D32(d)
        : "l"(a), "l"(b), "r"(accumulate)
        : "memory");
}
__device__ __forceinline__ void mma_m64n96k32_e4m3_ss(float (&d)[48], uint64_t a, uint64_t b,
                                                      int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 " DI_WG_D48_NAMES ", %48, %49, p, 1, 1;\n}\n"
        : DI_WG_D48(d)
        : "l"(a), "l"(b), "r"(accumulate)
        : "memory");
}

// d[64 x 64] (+)= a[64 x 16] b[16 x 64], f16 inputs, f32 accumulators, A and B from shared memory (both
// K-major: a rows of M, b rows of N); accumulate = 0 overwrites d. d as mma_m64n64k16's.
__device__ __forceinline__ void mma_m64n64k16_ss(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " DI_WG_D32_NAMES
        ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : DI_WG_D32(d)
        : "l"(a), "l"(b), "r"(accumulate)
        : "memory");
}

// MN-major descriptor of a B operand [K x N] whose N runs along 128-byte swizzled rows: 64 f16 of N a row,
// K rows at 128 bytes (8-row groups at sbo bytes), the next 64 of N at lbo bytes; the atom 1024-byte aligned.
__device__ __forceinline__ uint64_t desc_mn_major_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) |
           (uint64_t(1) << 62);
}

// d[64 x 256] += a[64 x 16] b[16 x 256], f16 inputs, f32 accumulators, a from registers (as
// mma_m64n64k16's), b MN-major (desc_mn_major_sw128); d[4j + v] = rows (g, g, g + 8, g + 8) x columns (8j +
// 2q, + 1, 8j + 2q, + 1), j < 32.
__device__ __forceinline__ void mma_m64n256k16_bt(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " DI_WG_D128_NAMES
        ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : DI_WG_D128(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1)
        : "memory");
}

// The same with a from shared memory too (K-major: desc_k_major_sw128).
__device__ __forceinline__ void mma_m64n256k16_ss_bt(float (&d)[128], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " DI_WG_D128_NAMES
        ", %128, %129, p, 1, 1, 0, 1;\n}\n"
        : DI_WG_D128(d)
        : "l"(a), "l"(b), "n"(1)
        : "memory");
}

#undef DI_WG_D32_NAMES
#undef DI_WG_D64_NAMES
#undef DI_WG_D32
#undef DI_WG_D64
#undef DI_WG_D128_NAMES
#undef DI_WG_D128

}  // namespace di::cuda::wg
