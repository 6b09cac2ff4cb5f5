// The CUDA backend's switches and numbers from the environment (A/B timing of kernels, options off until the
// GPU measures them). Callers read them once (a static).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace di::cuda {

// Unset gives the default, "0" off, anything else on.
inline bool env_switch(const char* name, bool on_by_default) {
    const char* v = std::getenv(name);
    return v == nullptr ? on_by_default : std::strcmp(v, "0") != 0;
}

// Unset gives the default, otherwise the value as a number (0 where it is none).
inline int64_t env_int(const char* name, int64_t by_default) {
    const char* v = std::getenv(name);
    return v == nullptr ? by_default : std::atoll(v);
}

}  // namespace di::cuda
