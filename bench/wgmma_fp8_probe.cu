// The W4A8 MoE kernels' inner loop without memory traffic: per 128-deep chunk, four wgmma m64n128k32 e4m3
// with A from registers (or, kSs, from shared memory, as a kernel whose A is converted by other warps would
// take it) and B (128 token rows) from 128-byte-swizzled shared memory, then wait, then (where set) the
// promotion of the chunk's sums into f32 with a scale per token column (64 FMAs a thread, the scales from
// shared memory) and (where set) the next chunk's fp4 -> e4m3 conversion of A, made while the current
// chunk's wgmmas run, as moe_w4a8_kernel and moe_w4a8_bulk_kernel do; and, for the ceiling, the wgmmas
// waited for once every 8 chunks. At 1 to 3 warpgroups an SM (one a block). What it answers: whether that
// chain alone (wait every chunk, promote, convert) caps the kernels far below the FP8 rate, and which link
// does. Last, the L2 -> SM read rate of 16-byte copies (what re-reading a token tile per weight tile costs).
//   wgmma_fp8_probe [iters=4096]   (one line per configuration: TFLOP/s of FP8 products)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/moe_w4a8.cuh"
#include "ops/cuda/wgmma.cuh"
#include "probe_timing.h"

namespace {

using namespace di::cuda;
using di::cuda::mma::word_of;

constexpr int kN = 128;  // token columns

// Each block: one warpgroup, a B tile of 128 rows x 128 e4m3 (one chunk) and 128 token scales in shared
// memory; `iters` chunks.
template <bool kConvert, bool kPromote, bool kSs, int kWaitEvery>
__global__ void __launch_bounds__(128) fp8_probe_kernel(float* out, int iters, uint32_t seed) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t base = (wg::smem_addr(smem_raw) + 1023u) & ~1023u;
    uint8_t* smem = smem_raw + (base - wg::smem_addr(smem_raw));
    const int tid = threadIdx.x, lane = tid & 31, q = lane & 3;
    // B (128 rows), then A (64 rows, kSs): small e4m3 values in any layout (the rate does not depend on them)
    for (int i = tid; i < (kN + 64) * 128; i += 128) smem[i] = uint8_t(0x30 + (i * 7 + seed) % 9);
    float* ts = reinterpret_cast<float*>(smem + (kN + 64) * 128);
    for (int i = tid; i < kN; i += 128) ts[i] = 1.0f + float(i % 3);
    wg::fence_proxy_async();
    __syncthreads();
    uint4 raw = make_uint4(seed * 0x9E3779B9u + tid, seed ^ 0x7f4a7c15u, tid * 0x85ebca6bu, seed + 17u);
    uint32_t lut0, lut1;
    w4a8::w4a8_lut(int(seed & 3u), lut0, lut1);
    uint32_t af[2][4][4];
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
            for (int r = 0; r < 4; ++r) af[b][s][r] = 0x38383838u;  // e4m3 1.0
    float acc[kN / 2], part[kN / 2];
#pragma unroll
    for (int v = 0; v < kN / 2; ++v) acc[v] = part[v] = 0.0f;
    auto convert = [&](uint32_t(&a)[4][4], int it) {  // two rows' 16 fp4 bytes, as the kernels' threads
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                w4a8::fp4x8_to_e4m3(word_of(raw, i) + uint32_t(it + h), lut0, lut1, a[i][h], a[i][2 + h]);
    };
    auto chunk = [&](uint32_t(&a)[4][4], uint32_t(&next)[4][4], int it) {
        wg::fence();
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            // Without the promotion a chunk adds onto the last one's sums: where each chunk overwrote them
            // unread, ptxas dropped those wgmmas (the first run showed rates 5x the tensor cores' peak).
            const int accumulate = s > 0 || (!kPromote && it > 0) ? 1 : 0;
            if constexpr (kSs) {
                wg::mma_m64n128k32_e4m3_ss(part, wg::desc_k_major_sw128(base + kN * 128 + s * 32),
                                           wg::desc_k_major_sw128(base + s * 32), accumulate);
            } else {
                wg::mma_m64n128k32_e4m3(part, a[s], wg::desc_k_major_sw128(base + s * 32), accumulate);
            }
        }
        wg::commit();
        if (kConvert) convert(next, it);
        if (kWaitEvery > 1 && (it + 1) % kWaitEvery != 0) return;
        wg::wait<0>();
#pragma unroll
        for (int v = 0; v < kN / 2; ++v) wg::keep(part[v]);
        if (kPromote) {
#pragma unroll
            for (int j = 0; j < kN / 8; ++j) {
                const float2 s2 = *reinterpret_cast<const float2*>(ts + 8 * j + 2 * q);
#pragma unroll
                for (int v = 0; v < 4; ++v)
                    acc[4 * j + v] = fmaf(part[4 * j + v], (v & 1) ? s2.y : s2.x, acc[4 * j + v]);
            }
        }
    };
    for (int it = 0; it < iters; it += 2) {
        chunk(af[0], af[1], it);
        chunk(af[1], af[0], it + 1);
    }
    wg::wait<0>();  // (kWaitEvery: the last chunks' wgmmas)
#pragma unroll
    for (int v = 0; v < kN / 2; ++v) wg::keep(part[v]);
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kN / 2; ++v) sum += acc[v] + part[v];
    if (sum == 12345.678f) out[blockIdx.x * 128 + tid] = sum;  // never true: keeps the work
}

// The L2 -> SM read rate the kernels' token tiles see: every block reads one `bytes`-sized buffer
// (L2-resident) over and over by 16-byte cp.async into a shared-memory ring, as the W4A8 kernels copy a token
// tile's chunk.
__global__ void __launch_bounds__(256)
    l2_read_kernel(const uint4* src, int64_t units, int iters, float* out) {
    __shared__ __align__(16) uint4 ring[8][256];
    const int tid = threadIdx.x;
    int64_t u = (int64_t(blockIdx.x) * 256 * 8 + tid) % units;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            wg::cp_async16(wg::smem_addr(&ring[s][tid]), src + u, true);
            u += 256;
            if (u >= units) u -= units;
        }
        wg::cp_async_commit();
        wg::cp_async_wait<0>();
    }
    if (reinterpret_cast<const float*>(&ring[tid & 7][tid])[0] == 12345.678f) out[tid] = 1.0f;
}

void run_l2(int sms, int iters, float* out) {
    for (const int64_t mb : {8, 32}) {
        const int64_t bytes = mb << 20;
        uint4* src = nullptr;
        if (cudaMalloc(&src, bytes) != cudaSuccess) return;
        cudaMemset(src, 0, bytes);
        for (int per_sm : {1, 2, 4}) {
            const int blocks = sms * per_sm;
            const float ms = probe_ms(
                iters, [&](int n, uint32_t) { l2_read_kernel<<<blocks, 256>>>(src, bytes / 16, n, out); });
            const double moved = double(blocks) * iters * 8 * 256 * 16;
            std::printf(
                "L2 -> shared memory by 16-byte cp.async, %lld MB buffer, %d x 256 threads an SM: %.2f "
                "TB/s\n",
                static_cast<long long>(mb), per_sm, moved / (ms * 1e-3) / 1e12);
        }
        cudaFree(src);
    }
}

template <bool kConvert, bool kPromote, bool kSs = false, int kWaitEvery = 1>
void run(int sms, int iters, float* out) {
    const int smem = (kN + 64) * 128 + kN * 4 + 1024;
    auto* kernel = fp8_probe_kernel<kConvert, kPromote, kSs, kWaitEvery>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    for (int per_sm : {1, 2, 3}) {  // ~170 registers a thread: three warpgroups fill an SM's
        const int blocks = sms * per_sm;
        const float ms =
            probe_ms(iters, [&](int n, uint32_t seed) { kernel<<<blocks, 128, smem>>>(out, n, seed); });
        const double flop = 2.0 * 64.0 * kN * 128.0 * double(iters) * blocks;
        std::printf(
            "wgmma m64n128k32 e4m3, A from %s, waited every %d chunk(s)%s%s, %d warpgroup(s) an SM: "
            "%.1f TFLOP/s (%.3f ms)\n",
            kSs ? "shared memory" : "registers", kWaitEvery, kPromote ? ", promoted" : "",
            kConvert ? ", next A converted from fp4" : "", per_sm, flop / (ms * 1e-3) / 1e12, ms);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const int iters = argc > 1 ? std::atoi(argv[1]) : 4096;
    float* out = nullptr;
    const int sms = probe_device("wgmma_fp8_probe", &out);
    if (sms == 0) return 1;
    run<false, false, false, 8>(sms, iters, out);  // the ceiling: 32 wgmmas between waits
    run<false, false>(sms, iters, out);
    run<false, true>(sms, iters, out);
    run<true, false>(sms, iters, out);
    run<true, true>(sms, iters, out);  // the W4A8 kernels' chain
    run<false, false, true, 8>(sms, iters, out);
    run<false, false, true>(sms, iters, out);
    run<false, true, true>(sms, iters, out);  // A converted by other warps: the multiplying warps' chain
    run_l2(sms, iters / 4, out);
    return probe_done("wgmma_fp8_probe", out);
}
