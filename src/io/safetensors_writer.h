// Writes a safetensors file (used for the demo model and for test checkpoints).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace di::io {

struct TensorToWrite {
    std::string name;
    std::string st_dtype;  // "F32", "BF16", "F8_E4M3", "F8_E8M0", "I8", "I64", ...
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;  // raw little-endian data, numel * dtype size
};

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace di::io
