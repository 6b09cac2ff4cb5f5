#include "ops/cuda/early_launch.cuh"

#include "ops/cuda/env_switch.h"

namespace di::cuda {

bool early_launch_enabled() {
    static const bool on = env_switch("DEEPINFER_EARLY_LAUNCH", true);
    return on;
}

}  // namespace di::cuda
