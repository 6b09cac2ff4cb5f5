// What the wgmma probes share (bench/wgmma_probe.cu, bench/wgmma_fp8_probe.cu): their device and its end, and
// a kernel's time (one warm-up launch, then one launch between CUDA events; launch(iters, seed) enqueues it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

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

// The probe's device: its name and SM count printed, the SM count returned (0 with a message where there is
// no CUDA device), and `out` a scratch of 4 x 128 floats an SM the kernels may write.
inline int probe_device(const char* probe, float** out) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        std::fprintf(stderr, "%s: no CUDA device\n", probe);
        return 0;
    }
    cudaMalloc(out, size_t(prop.multiProcessorCount) * 4 * 128 * sizeof(float));
    std::printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
    return prop.multiProcessorCount;
}

// The exit code once every launch finished: 1 with the error where one failed.
inline int probe_done(const char* probe, float* out) {
    const cudaError_t e = cudaDeviceSynchronize();
    cudaFree(out);
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", probe, cudaGetErrorString(e));
        return 1;
    }
    return 0;
}
