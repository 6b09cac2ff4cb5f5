// Backend::copy_many on the GPU: a batch of device-to-device copies, one block row per copy.
#include <algorithm>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"

namespace di::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksPerCopy = 32;

struct CopyBatch {
    CopyJob job[kCopyJobsPerLaunch];
};

__global__ void __launch_bounds__(kThreads) copies_kernel(const __grid_constant__ CopyBatch batch) {
    const CopyJob& j = batch.job[blockIdx.y];
    const int64_t start = int64_t(blockIdx.x) * kThreads + threadIdx.x, step = int64_t(gridDim.x) * kThreads;
    const auto aligned =
        (reinterpret_cast<uintptr_t>(j.dst) | reinterpret_cast<uintptr_t>(j.src) | uintptr_t(j.bytes)) % 16 ==
        0;
    if (aligned) {
        auto* d = static_cast<uint4*>(j.dst);
        const auto* s = static_cast<const uint4*>(j.src);
        for (int64_t i = start; i < j.bytes / 16; i += step) d[i] = s[i];
    } else {
        auto* d = static_cast<unsigned char*>(j.dst);
        const auto* s = static_cast<const unsigned char*>(j.src);
        for (int64_t i = start; i < j.bytes; i += step) d[i] = s[i];
    }
}

}  // namespace

void launch_copies(const CopyJob* jobs, int64_t count, Stream s) {
    for (int64_t first = 0; first < count; first += kCopyJobsPerLaunch) {
        const int64_t n = std::min<int64_t>(kCopyJobsPerLaunch, count - first);
        CopyBatch batch{};
        int64_t blocks = 1;
        for (int64_t i = 0; i < n; ++i) {
            const CopyJob& j = jobs[first + i];
            batch.job[i] = j;
            const int64_t units = j.bytes % 16 == 0 ? j.bytes / 16 : j.bytes;
            blocks = std::max(blocks, std::min(kMaxBlocksPerCopy, (units + kThreads - 1) / kThreads));
        }
        copies_kernel<<<dim3(unsigned(blocks), unsigned(n)), kThreads, 0, as_stream(s)>>>(batch);
        DI_CUDA_CHECK(cudaGetLastError());
    }
}

}  // namespace di::cuda
