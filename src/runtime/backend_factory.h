// Maps a backend name ("ref", "cuda") to an ops::Backend instance.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/backend.h"

namespace di::runtime {

Result<std::unique_ptr<ops::Backend>> make_backend(const std::string& name);
std::vector<std::string> backend_names();  // those built into this binary

}  // namespace di::runtime
