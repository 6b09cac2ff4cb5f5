// Reference lightning indexer: weighted ReLU scores, causal cutoff, top-k with the lower-id tie rule.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "ops/ref/ref_backend_impl.h"

namespace di::ops {

void RefBackend::indexer_topk(const IndexerTopkArgs& a) {
    check(a);
    const int64_t L = a.q.shape[0], H = a.q.shape[1], dim = a.q.shape[2], T = a.keys.shape[0];
    const int64_t k = a.picks.shape[1];
    std::vector<double> score(static_cast<size_t>(T));
    std::vector<int64_t> order(static_cast<size_t>(T));
    for (int64_t t = 0; t < L; ++t) {
        const int64_t visible = (a.pos0 + t + 1) / a.rate;
        for (int64_t w = 0; w < T; ++w) {
            if (w >= visible) {
                score[size_t(w)] = -std::numeric_limits<double>::infinity();
                continue;
            }
            double s = 0;
            for (int64_t h = 0; h < H; ++h) {
                const float* q = a.q.at<float>(t, h);
                double dot = 0;
                for (int64_t c = 0; c < dim; ++c) dot += double(q[c]) * row_f32(a.keys, w)[c];
                const double wt =
                    double(a.weights.ptr<float>()[t * a.weights.stride[0] + h]) * a.weight_scale;
                s += std::max(dot, 0.0) * a.score_scale * wt;
            }
            score[size_t(w)] = s;
        }
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t x, int64_t y) { return score[size_t(x)] > score[size_t(y)]; });
        int32_t* out = a.picks.ptr<int32_t>() + t * a.picks.stride[0];
        for (int64_t j = 0; j < k; ++j) out[j] = order[size_t(j)] < visible ? int32_t(order[size_t(j)]) : -1;
    }
}

}  // namespace di::ops
