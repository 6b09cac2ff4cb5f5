// Maps a backend name ("ref", "cpu", "cuda", or "auto") to an ops::Backend instance.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/backend.h"

namespace di::runtime {

// "auto": the fastest verified backend this machine runs: cuda where the build has it and a CUDA device is
// present, else cpu; `why` says which condition decided. Any other name is returned as given.
struct BackendChoice {
    std::string name, why;
};
BackendChoice resolve_backend(const std::string& name);

Result<std::unique_ptr<ops::Backend>> make_backend(const std::string& name);  // "auto" resolved first
// The same on a given device: GPU `device` for cuda (an error where there is no such GPU); host backends
// ignore it.
Result<std::unique_ptr<ops::Backend>> make_backend_on(const std::string& name, int device);
std::vector<std::string> backend_names();  // those built into this binary

}  // namespace di::runtime
