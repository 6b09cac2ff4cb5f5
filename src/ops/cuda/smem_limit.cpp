#include "ops/cuda/smem_limit.h"

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#include "ops/cuda/cuda_check.h"

namespace di::cuda {

size_t smem_optin() {
    int dev = 0;
    DI_CUDA_CHECK(cudaGetDevice(&dev));
    static std::array<std::atomic<int>, 64> known{};  // by device, 0: not asked yet (launch paths ask)
    if (dev < int(known.size()) && known[size_t(dev)] > 0) return size_t(known[size_t(dev)].load());
    int bytes = 0;
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (dev < int(known.size())) known[size_t(dev)] = bytes;
    return size_t(bytes);
}

void raise_dynamic_smem(const void* kernel, size_t bytes) {
    constexpr size_t kDefault = 48 * 1024;  // what every kernel may take without the attribute
    if (bytes <= kDefault) return;
    int dev = 0;
    DI_CUDA_CHECK(cudaGetDevice(&dev));
    static std::mutex mu;
    static std::map<std::pair<const void*, int>, size_t> raised;  // (kernel, device) -> limit set
    std::lock_guard lk(mu);
    size_t& limit = raised[{kernel, dev}];
    if (bytes <= limit) return;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    limit = bytes;
}

}  // namespace di::cuda
