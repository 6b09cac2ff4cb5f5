// A probe kernel's time: one warm-up launch, then one launch between CUDA events (bench/wgmma_probe.cu,
// bench/wgmma_fp8_probe.cu). launch(iters, seed) enqueues the kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

template <class Launch>
float probe_ms(int iters, Launch&& launch) {
    launch(16, 1u);  // warm-up
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    cudaEventRecord(a);
    launch(iters, 2u);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a), cudaEventDestroy(b);
    return ms;
}
