// Sampling candidates of logits rows, so a step whose sequences sample (temperature, top-k, top-p, min-p,
// logprobs) moves a few kilobytes a row to the host instead of the whole vocabulary (runtime/sampler.h draws
// from them exactly as from the full row, or asks for the row where the candidates do not reach).
//   top_candidates: per row r of x [n, V], with its temperature T = temperature[r]:
//     ids[r, :] / values[r, :]  the C best ids by (value descending, id ascending), C = ids.shape[1] <= V,
//     and
//                               their values
//     sums[r, :]  three doubles (stored as their i64 bit patterns), each summed in id order in double:
//                 sum_1 = sum_v exp(x_v - max), and for T > 0 sum_t = sum_v exp(x_v / T - max / T) and
//                 total_t = sum_v (exp(x_v / T - max / T) / sum_t) (0 and 0 for T <= 0), max = values[r, 0],
//                 every x_v and T first widened to double
//     bad[r]      the index of the row's first NaN or infinite value, or -1 (its other outputs then mean
//                 nothing: the caller stops with an error)
#pragma once

#include <cstdint>

#include "ops/op_common.h"

namespace di::ops {

struct TopCandidatesArgs {
    TensorView x;            // f32 [n, V]
    TensorView temperature;  // f32 [n]
    TensorView ids;          // i32 [n, C]
    TensorView values;       // f32 [n, C]
    TensorView sums;         // i64 [n, 3]: the bits of sum_1, sum_t, total_t
    TensorView bad;          // i32 [n]
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, x, Role::kIn);
        DI_VISIT(f, temperature, Role::kIn);
        DI_VISIT(f, ids, Role::kOut);
        DI_VISIT(f, values, Role::kOut);
        DI_VISIT(f, sums, Role::kOut);
        DI_VISIT(f, bad, Role::kOut);
    }
};
void check(const TopCandidatesArgs& a);

// One row on the host (the reference: what every backend's top_candidates computes).
void top_candidates_row(const float* x, int64_t V, float temperature, int32_t* ids, float* values, int64_t C,
                        double sums[3], int32_t* bad);

}  // namespace di::ops
