// The sampling candidates of logits rows on the device (ops/sampling.h's top_candidates): plain types only
// (kernels.h).
#pragma once

#include <cstdint>

#include "ops/cuda/kernels.h"

namespace di::cuda {

inline constexpr int64_t kTopCandidatesMax = 1024;  // C at most (the block's sort)

// x [n, V] f32 (row stride ldx), temperature [n] -> ids / values [n, C] (C <= kTopCandidatesMax, <= V), sums
// [n, 3] doubles (sum_1, sum_t, total_t), bad [n].
void launch_top_candidates(const float* x, int64_t ldx, int64_t n, int64_t V, const float* temperature,
                           int32_t* ids, float* values, int64_t C, double* sums, int32_t* bad, Stream s);

}  // namespace di::cuda
