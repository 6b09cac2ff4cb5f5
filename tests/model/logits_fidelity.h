// Measures of two logit matrices [rows, vocab] against each other, for the golden tests on every backend
// (tests/model, tests/gpu): argmax agreement and max |d|, and teacher-forced fidelity.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace di::test {

struct Agreement {
    float max_diff = 0, max_ref = 0;
    int64_t argmax_mismatch = 0;
};

inline Agreement compare(const std::vector<float>& got, const std::vector<float>& ref, int64_t rows,
                         int64_t vocab) {
    Agreement a;
    for (const float x : ref) a.max_ref = std::max(a.max_ref, std::fabs(x));
    for (int64_t r = 0; r < rows; ++r) {
        int64_t bg = 0, br = 0;
        for (int64_t v = 0; v < vocab; ++v) {
            const size_t i = size_t(r * vocab + v);
            a.max_diff = std::max(a.max_diff, std::fabs(got[i] - ref[i]));
            if (got[i] > got[size_t(r * vocab + bg)]) bg = v;
            if (ref[i] > ref[size_t(r * vocab + br)]) br = v;
        }
        a.argmax_mismatch += bg != br;
    }
    return a;
}

// Teacher-forced agreement of two logit matrices: top-1 agreement, the lowest per-row cosine, and the largest
// and median per-row max |d| relative to max |ref|.
struct Fidelity {
    double top1 = 0, min_cos = 1, max_rel = 0, median_rel = 0;
};
inline Fidelity fidelity(const std::vector<float>& got, const std::vector<float>& ref, int64_t rows,
                         int64_t vocab) {
    Fidelity f;
    double m = 0;
    for (const float x : ref) m = std::max(m, double(std::fabs(x)));
    std::vector<double> rel;
    int64_t agree = 0;
    for (int64_t r = 0; r < rows; ++r) {
        double dot = 0, ng = 0, nr = 0, d = 0;
        int64_t bg = 0, br = 0;
        for (int64_t v = 0; v < vocab; ++v) {
            const double g = got[size_t(r * vocab + v)], e = ref[size_t(r * vocab + v)];
            dot += g * e, ng += g * g, nr += e * e, d = std::max(d, std::fabs(g - e));
            if (g > got[size_t(r * vocab + bg)]) bg = v;
            if (e > ref[size_t(r * vocab + br)]) br = v;
        }
        agree += bg == br;
        f.min_cos = std::min(f.min_cos, dot / std::sqrt(ng * nr));
        rel.push_back(d / m);
    }
    f.top1 = double(agree) / double(rows);
    f.max_rel = *std::max_element(rel.begin(), rel.end());
    std::nth_element(rel.begin(), rel.begin() + long(rel.size() / 2), rel.end());
    f.median_rel = rel[rel.size() / 2];
    return f;
}

}  // namespace di::test
