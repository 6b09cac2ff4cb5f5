// A kernel's dynamic shared-memory limit, raised where a launch needs more than the default 48 KB.
// cudaFuncSetAttribute acts on the calling thread's current device only: a limit raised on GPU 0 does not
// hold on GPU 1, whose launches of that kernel would then fail (expert parallelism runs a thread a GPU). So
// the limit is raised once per (kernel, device) and new maximum, under a lock (the rank threads launch at
// once).
#pragma once

#include <cstddef>

namespace di::cuda {

// The most shared memory a block may opt in to on the current device
// (cudaDevAttrMaxSharedMemoryPerBlockOptin).
size_t smem_optin();

// Makes launches of `kernel` with up to `bytes` of dynamic shared memory valid on the current device.
void raise_dynamic_smem(const void* kernel, size_t bytes);

template <class K>
void raise_dynamic_smem(K* kernel, size_t bytes) {
    raise_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

}  // namespace di::cuda
