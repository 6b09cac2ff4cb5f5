#include "ops/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace di::ops {

void check(const TopCandidatesArgs& a) {
    check_rows(a.x, 2, "top_candidates.x");
    const int64_t n = a.x.shape[0], V = a.x.shape[1];
    DI_CHECK(V > 0 && V <= INT32_MAX, "top_candidates: row width {}", V);
    check_dtype(a.temperature, DType::kF32, "top_candidates.temperature");
    check_dtype(a.ids, DType::kI32, "top_candidates.ids");
    check_dtype(a.values, DType::kF32, "top_candidates.values");
    check_dtype(a.sums, DType::kI64, "top_candidates.sums");
    check_dtype(a.bad, DType::kI32, "top_candidates.bad");
    DI_CHECK(a.temperature.is_contiguous() && a.temperature.numel() == n && a.bad.is_contiguous() &&
                 a.bad.numel() == n,
             "top_candidates: temperature {} bad {} for x {}", a.temperature.describe(), a.bad.describe(),
             a.x.describe());
    DI_CHECK(a.ids.ndim == 2 && a.ids.is_contiguous() && a.ids.shape[0] == n && a.ids.shape[1] >= 1 &&
                 a.ids.shape[1] <= V && a.values.is_contiguous() && a.values.ndim == 2 &&
                 a.values.shape[0] == n && a.values.shape[1] == a.ids.shape[1],
             "top_candidates: ids {} values {} for x {}", a.ids.describe(), a.values.describe(),
             a.x.describe());
    DI_CHECK(a.sums.is_contiguous() && a.sums.ndim == 2 && a.sums.shape[0] == n && a.sums.shape[1] == 3,
             "top_candidates: sums {} for x {}", a.sums.describe(), a.x.describe());
}

void top_candidates_row(const float* x, int64_t V, float temperature, int32_t* ids, float* values, int64_t C,
                        double sums[3], int32_t* bad) {
    *bad = -1;
    for (int64_t v = 0; v < V; ++v)
        if (!std::isfinite(x[v])) {
            *bad = int32_t(v);
            break;
        }
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + C, order.end(),
                      [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    for (int64_t i = 0; i < C; ++i) ids[i] = order[size_t(i)], values[i] = x[order[size_t(i)]];
    // The sampler's sums (runtime/sampler.cpp): the same expressions in the same (id) order.
    const double max = double(values[0]);
    double sum_1 = 0;
    for (int64_t v = 0; v < V; ++v) sum_1 += std::exp(double(x[v]) - max);
    double sum_t = 0, total_t = 0;
    if (temperature > 0.0f) {
        const double T = temperature, m = max / T;
        for (int64_t v = 0; v < V; ++v) sum_t += std::exp(double(x[v]) / T - m);
        for (int64_t v = 0; v < V; ++v) total_t += std::exp(double(x[v]) / T - m) / sum_t;
    }
    sums[0] = sum_1, sums[1] = sum_t, sums[2] = total_t;
}

}  // namespace di::ops
