// The CUDA backend's on/off switches from the environment (A/B timing of kernels, options off until the GPU
// measures them): unset gives the default, "0" off, anything else on. Callers read it once (a static).
#pragma once

#include <cstdlib>
#include <cstring>

namespace di::cuda {

inline bool env_switch(const char* name, bool on_by_default) {
    const char* v = std::getenv(name);
    return v == nullptr ? on_by_default : std::strcmp(v, "0") != 0;
}

}  // namespace di::cuda
