// The W4A8 kernel's timing probes' host side (DEEPINFER_W4A8_PROBE bit 256, moe_w4a8.cu): the blocks' phase
// counts' buffer and their printing. Timing only.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/moe_w4a8.cuh"

namespace di::cuda::w4a8 {

// Probe bit 256 of `probe`: a zeroed buffer for `blocks` blocks' phase counts (W8Io::clocks; its own, as
// every scratch slot has a user; one GPU), or null where the bit is not set.
long long* probe_clocks(int probe, int64_t blocks, cudaStream_t st) {
    if (!(probe & 256)) return nullptr;
    static long long* buf = nullptr;
    static int64_t cap = 0;
    if (cap < blocks) {
        DI_CUDA_CHECK(cudaStreamSynchronize(st));
        if (buf != nullptr) DI_CUDA_CHECK(cudaFree(buf));
        DI_CUDA_CHECK(cudaMalloc(&buf, size_t(blocks) * 4 * sizeof(long long)));
        cap = blocks;
    }
    DI_CUDA_CHECK(cudaMemsetAsync(buf, 0, size_t(blocks) * 4 * sizeof(long long), st));
    return buf;
}

// One launch's phase counts as one stderr line (the launch waited for), the buffer zeroed for the next.
void print_probe_clocks(long long* clocks, int64_t blocks, bool up, cudaStream_t st) {
    std::vector<long long> h(size_t(blocks) * 4);
    DI_CUDA_CHECK(
        cudaMemcpyAsync(h.data(), clocks, h.size() * sizeof(long long), cudaMemcpyDeviceToHost, st));
    DI_CUDA_CHECK(cudaStreamSynchronize(st));
    DI_CUDA_CHECK(cudaMemsetAsync(clocks, 0, h.size() * sizeof(long long), st));
    double sum[3] = {0, 0, 0};
    int64_t ran = 0;  // the first tiles of items measured (a block an item, or the persistent form's)
    for (int64_t b = 0; b < blocks; ++b) {
        ran += h[size_t(b) * 4 + 3];
        for (int k = 0; k < 3; ++k) sum[k] += double(h[size_t(b) * 4 + k]);
    }
    if (ran == 0) return;
    std::fprintf(stderr,
                 "w4a8 probe clocks (%s): %lld items, cycles an item's first tile: prologue %.0f, "
                 "chunks %.0f, stores %.0f\n",
                 up ? "up" : "down", static_cast<long long>(ran), sum[0] / double(ran), sum[1] / double(ran),
                 sum[2] / double(ran));
}

}  // namespace di::cuda::w4a8
