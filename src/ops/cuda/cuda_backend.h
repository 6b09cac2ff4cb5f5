// The CUDA backend (sm_90a): every op of ops/backend.h on one GPU. Inputs and outputs are device views
// (Device::kCuda) allocated through allocator(); copy() moves data in any direction. Plain C++ interface:
// no CUDA header is needed to use it.
#pragma once

#include <memory>

#include "ops/backend.h"

namespace di::ops {

// Backend on CUDA device `device`; aborts with a message if the device cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

// Number of CUDA devices visible (0 when there is no driver or GPU), for tests that skip without a GPU.
int cuda_device_count();

}  // namespace di::ops
