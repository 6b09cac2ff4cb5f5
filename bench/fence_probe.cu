// Whether a thread's shared-memory proxy fence (fence.proxy.async.shared::cta, MEMBAR.ALL.CTA and
// FENCE.VIEW.ASYNC.S in the SASS) waits for that thread's cp.async copies still in flight. The converting
// W4A8 kernel (moe_w4a8_bulk_ss.cu) fences after each chunk's stores while its next chunks' copies are in
// flight; if the fence waits for them, every chunk waits a DRAM round trip (its TMA form, kTma, has no copies
// of its own in flight there). One warp a block, one block an SM; each round a lane copies 64 bytes by
// cp.async from lines no round touched before (a buffer far past the L2, so DRAM), stores 16 bytes to shared
// memory and times the fence with clock64.
//   fence_probe [rounds=64]   (cycles of the fence a round, mean over rounds and blocks, by mode: no copies,
//   copies in flight, copies waited for before the fence; and the copies' own latency for comparison)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ops/cuda/cuda_check.h"

namespace {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// kMode 0: no copies; 1: copies in flight at the fence; 2: copies waited for before it; 3: the copies'
// latency (issue to wait_group 0) instead of the fence's
template <int kMode>
__global__ void fence_kernel(const uint4* src, int64_t round_units, int rounds, long long* cycles) {
    __shared__ uint4 ring[4][32];
    __shared__ uint4 out[32];
    const int lane = int(threadIdx.x);
    long long total = 0;
    for (int r = 0; r < rounds; ++r) {
        const uint4* p = src + (int64_t(r) * gridDim.x + blockIdx.x) * round_units + lane * 4;
        if constexpr (kMode > 0) {
            for (int i = 0; i < 4; ++i)
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(&ring[i][lane])),
                             "l"(p + i)
                             : "memory");
            asm volatile("cp.async.commit_group;\n" ::: "memory");
        }
        long long t0 = clock64();
        if constexpr (kMode == 2) asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        if constexpr (kMode == 3) {
            asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        } else {
            if constexpr (kMode == 2) t0 = clock64();
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %3};\n" ::"r"(smem_u32(&out[lane])), "r"(r),
                         "r"(lane), "r"(0)
                         : "memory");
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        }
        total += clock64() - t0;
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");  // the rounds independent
        __syncwarp();
    }
    if (lane == 0) cycles[blockIdx.x] = total / rounds;
}

template <int kMode>
double run(const uint4* src, int64_t round_units, int rounds, int blocks, long long* d_cycles) {
    fence_kernel<kMode><<<blocks, 32>>>(src, round_units, rounds, d_cycles);
    DI_CUDA_CHECK(cudaGetLastError());
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<long long> c(static_cast<size_t>(blocks));
    DI_CUDA_CHECK(cudaMemcpy(c.data(), d_cycles, c.size() * sizeof(long long), cudaMemcpyDeviceToHost));
    double sum = 0;
    for (long long v : c) sum += double(v);
    return sum / blocks;
}

}  // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 64;
    int sms = 0;
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    // each round of each block its own 16 KB (a warp reads 32 x 64 bytes of it): no line read twice, and each
    // mode's quarter of the buffer (135 MB at 132 SMs and 64 rounds) far past the L2
    const int64_t round_units = 16384 / 16;
    const size_t bytes =
        size_t(rounds) * size_t(sms) * size_t(round_units) * 16 * 4;  // x4 modes' fresh lines
    uint4* src = nullptr;
    long long* d_cycles = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&src, bytes));
    DI_CUDA_CHECK(cudaMemset(src, 1, bytes));
    {  // the buffer's last lines out of the L2: write 256 MB elsewhere after it
        void* flush = nullptr;
        DI_CUDA_CHECK(cudaMalloc(&flush, size_t(256) << 20));
        DI_CUDA_CHECK(cudaMemset(flush, 2, size_t(256) << 20));
        DI_CUDA_CHECK(cudaDeviceSynchronize());
        DI_CUDA_CHECK(cudaFree(flush));
    }
    DI_CUDA_CHECK(cudaMalloc(&d_cycles, size_t(sms) * sizeof(long long)));
    const int64_t quarter = int64_t(bytes / 16 / 4);
    std::printf("fence_probe: %d blocks x 32 threads, %d rounds, %.1f MB read once\n", sms, rounds,
                double(bytes) / 1e6);
    std::printf("fence, no copies in flight:          %8.0f cycles\n",
                run<0>(src, round_units, rounds, sms, d_cycles));
    std::printf("fence, the round's copies in flight: %8.0f cycles\n",
                run<1>(src + quarter, round_units, rounds, sms, d_cycles));
    std::printf("fence, the copies waited for first:  %8.0f cycles\n",
                run<2>(src + 2 * quarter, round_units, rounds, sms, d_cycles));
    std::printf("the copies' own latency:             %8.0f cycles\n",
                run<3>(src + 3 * quarter, round_units, rounds, sms, d_cycles));
    cudaFree(src), cudaFree(d_cycles);
    return 0;
}
