#include "ops/cuda/early_launch.cuh"

#include <cstdlib>
#include <cstring>

namespace di::cuda {

bool early_launch_enabled() {
    static const bool on = [] {
        const char* v = std::getenv("DEEPINFER_EARLY_LAUNCH");
        return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    return on;
}

}  // namespace di::cuda
