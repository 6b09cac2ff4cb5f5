// NumPy .npy files (version 1.0, little-endian, C order): float32 and int32 arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace di::io {

Status write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);

struct NpyArray {
    std::vector<int64_t> shape;
    std::vector<float> f32;    // filled for '<f4'
    std::vector<int64_t> i64;  // filled for '<i4' / '<i8'
};
Result<NpyArray> read_npy(const std::string& path);

}  // namespace di::io
