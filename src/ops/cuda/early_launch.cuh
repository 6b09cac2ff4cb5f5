// Programmatic dependent launch (sm_90): a kernel started with launch_early may begin while the kernel before
// it in the stream is still draining, so that its launch latency and its first weight loads (weights: no
// kernel writes them) overlap the previous kernel's tail. Such a kernel must call wait_prior() in every
// thread before it reads or writes any buffer an earlier kernel touches, and before it returns (a grid that
// ended without waiting could complete ahead of its predecessor). Kernels call allow_early_next() at their
// start: it lets the stream's next kernel, if that one was started with launch_early, be scheduled on the
// multiprocessors this one leaves free. Both instructions do nothing where no dependent launch is set up, and
// DEEPINFER_EARLY_LAUNCH=0 starts every kernel the ordinary way.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "ops/cuda/cuda_check.h"

namespace di::cuda {

__device__ __forceinline__ void wait_prior() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_early_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launch_early sets up the dependent launch (read once from DEEPINFER_EARLY_LAUNCH; on by default).
bool early_launch_enabled();

template <typename... Params, typename... Args>
void launch_early(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                  Args&&... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = early_launch_enabled() ? 1 : 0;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace di::cuda
