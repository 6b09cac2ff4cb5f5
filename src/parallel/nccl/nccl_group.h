// Ranks on the GPUs of this host through NCCL (issue: several GPUs): one communicator per device, made
// together in one process (ncclCommInitAll), each rank driven by its own thread. libnccl is loaded with
// dlopen, so a binary that never asks for it needs no NCCL library. Sums are NCCL's own order (fixed for a
// given group and size, the same bits on every rank): expert parallelism adds contributions that are
// non-zero on one rank only, exact in any order.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace di::parallel {

// Ranks 0 .. devices - 1 on CUDA devices 0 .. devices - 1. Collectives run on each rank's own stream,
// after the device's work so far, and return when they are done; one that does not finish within
// `timeout` aborts the communicator (every rank's collectives then fail) and returns an error.
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_group(int devices,
                                                                   std::chrono::milliseconds timeout);

}  // namespace di::parallel
