// Named random-weight model shapes for benchmarks and the kernel screen: "mid" (real V4 head and index
// shapes at reduced width, depth and vocabulary) and "flash" (DeepSeek-V4-Flash's dimensions, formats and
// layer types, its first N layers).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "demo/demo_model.h"

namespace di::demo {

RandomModelSpec mid_spec();
// V4-Flash's first n_layers layers (1..43): two sliding-window layers, then CSA and HCA alternating.
RandomModelSpec flash_spec(int64_t n_layers);
// "mid" or "flash" (layers: flash only); an unknown name or a layer count outside 1..43 is an error.
Result<RandomModelSpec> preset_spec(std::string_view name, int64_t layers);

}  // namespace di::demo
