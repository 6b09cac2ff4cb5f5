#include "ops/cuda/cuda_allocator.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace di::ops::cuda_impl {

size_t CachingAllocator::round_size(size_t bytes) {
    const size_t q = bytes < (1u << 20) ? 512 : (2u << 20);
    return std::max<size_t>(q, (bytes + q - 1) / q * q);
}

void* CachingAllocator::allocate(size_t bytes) {
    const size_t size = round_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    void* p = nullptr;
    auto it = free_.find(size);
    if (it != free_.end()) {
        p = it->second;
        free_.erase(it);
    } else {
        DI_CHECK(cudaSetDevice(device_) == cudaSuccess, "cudaSetDevice({}) failed", device_);
        cudaError_t e = cudaMalloc(&p, size);
        if (e != cudaSuccess) {  // give cached blocks back and retry once
            (void)cudaGetLastError();
            for (auto& [s, q] : free_) {
                cudaFree(q);
                reserved_ -= s;
            }
            free_.clear();
            e = cudaMalloc(&p, size);
        }
        if (e == cudaErrorMemoryAllocation) {  // a resource limit, not a bug: one line and a failing exit
            std::fputs(
                fmt::format("deepinfer: out of GPU memory on device {}: {:.2f} GiB more needed with {:.2f} "
                            "GiB in use; fewer tokens per step (serve: --step-tokens, --prefill-chunk) "
                            "or fewer sequences need less\n",
                            device_, double(size) / double(1 << 30), double(in_use_) / double(1 << 30))
                    .c_str(),
                stderr);
            std::fflush(stderr);
            std::_Exit(EXIT_FAILURE);
        }
        DI_CHECK(e == cudaSuccess, "cudaMalloc of {} bytes failed: {} ({} bytes in use)", size,
                 cudaGetErrorString(e), in_use_);
        reserved_ += size;
    }
    live_[p] = size;
    in_use_ += size;
    return p;
}

void CachingAllocator::deallocate(void* p) {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    DI_CHECK(it != live_.end(), "deallocate of a pointer this allocator did not hand out");
    free_.emplace(it->second, p);
    in_use_ -= it->second;
    live_.erase(it);
}

CachingAllocator::~CachingAllocator() {
    for (auto& [s, q] : free_) cudaFree(q);
    for (auto& [q, s] : live_) cudaFree(q);
}

}  // namespace di::ops::cuda_impl
