// The greedy pick of logits rows on the device (ops/elementwise.h's argmax): plain types only (kernels.h).
#pragma once

#include <cstdint>

#include "ops/cuda/kernels.h"

namespace di::cuda {

// x [n, V] f32 (row stride ldx) -> ids [n] (first index of each row's largest finite value, 0 if none) and
// bad [n] (first non-finite index, or -1).
void launch_argmax(const float* x, int64_t ldx, int64_t n, int64_t V, int32_t* ids, int32_t* bad, Stream s);

}  // namespace di::cuda
