// Reference MoE: routing (hash / score top-k) and the routed experts with clamped SwiGLU.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/act_quant.h"
#include "ops/ref/ref_backend_impl.h"

namespace di::ops {
namespace {

double score_fn(ScoreFunc f, double x) {
    if (f == ScoreFunc::kSigmoid) return 1.0 / (1.0 + std::exp(-x));
    const double softplus = x > 20.0 ? x : std::log1p(std::exp(x));  // torch softplus threshold 20
    return std::sqrt(softplus);
}

}  // namespace

// ref: transformers 5.17 DeepseekV4TopKRouter / DeepseekV4HashRouter
void RefBackend::route(const RouteArgs& a) {
    check(a);
    const int64_t n = a.logits.shape[0], E = a.logits.shape[1], k = a.ids.shape[1];
    std::vector<double> score(static_cast<size_t>(E)), key(static_cast<size_t>(E));
    std::vector<int64_t> order(static_cast<size_t>(E));
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t e = 0; e < E; ++e) {
            score[size_t(e)] = float(score_fn(a.func, row_f32(a.logits, t)[e]));
            key[size_t(e)] = float(score[size_t(e)] + (a.bias.empty() ? 0.0f : a.bias.ptr<float>()[e]));
        }
        int32_t* ids = a.ids.ptr<int32_t>() + t * a.ids.stride[0];
        if (!a.tid2eid.empty()) {
            const int64_t tok = a.tokens.ptr<int32_t>()[t];
            DI_CHECK(tok >= 0 && tok < a.tid2eid.shape[0], "token {} outside tid2eid rows {}", tok,
                     a.tid2eid.shape[0]);
            for (int64_t j = 0; j < k; ++j) {
                const int64_t i = tok * a.tid2eid.stride[0] + j;
                const int64_t e = a.tid2eid.dtype == DType::kI64 ? a.tid2eid.ptr<int64_t>()[i]
                                                                 : a.tid2eid.ptr<int32_t>()[i];
                DI_CHECK(e >= 0 && e < E, "tid2eid[{}] = {} outside {} experts", tok, e, E);
                ids[j] = int32_t(e);
            }
        } else {
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(),
                             [&](int64_t x, int64_t y) { return key[size_t(x)] > key[size_t(y)]; });
            for (int64_t j = 0; j < k; ++j) ids[j] = int32_t(order[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j < k; ++j) sum += score[size_t(ids[j])];
        float* w = a.weights.ptr<float>() + t * a.weights.stride[0];
        for (int64_t j = 0; j < k; ++j) w[j] = float(score[size_t(ids[j])] / (sum + 1e-20) * a.scaling);
    }
}

// ref: transformers 5.17 DeepseekV4Experts: per (token, slot) down(swiglu(gate, up)) * w, summed in slot
// order. MoeArgs::Pass splits it in two for expert parallelism: the unweighted pair outputs (float(d)) of
// some experts, then the weighted sum of them, with the same products and sums as the one call.
// The pairs are taken expert by expert, each expert's weights dequantised once (QWeight::at's values), so a
// pair's products and sums are those of the per-element form, at a fraction of its time.
void RefBackend::moe(const MoeArgs& a) {
    check(a);
    using Pass = MoeArgs::Pass;
    const int64_t n = a.x.shape[0], D = a.x.shape[1], k = a.ids.shape[1];
    const bool quant = a.act == ActQuant::kFp8Block128;
    // [n, k, D]: each pair's unweighted output (the slots themselves for the two passes)
    std::vector<float> whole(a.pass == Pass::kWhole ? size_t(n * k * D) : 0);
    float* pair_out = a.pass == Pass::kWhole ? whole.data() : a.slots.ptr<float>();
    if (a.pass != Pass::kCombine) {
        std::vector<std::vector<int64_t>> pairs_of(static_cast<size_t>(a.n_experts));  // t * k + j
        for (int64_t t = 0; t < n; ++t)
            for (int64_t j = 0; j < k; ++j) {
                const int32_t e = a.ids.ptr<int32_t>()[t * a.ids.stride[0] + j];
                DI_CHECK(e >= 0 && e < a.n_experts, "expert id {} outside {}", e, a.n_experts);
                pairs_of[size_t(e)].push_back(t * k + j);
            }
        // the tokens' rows as the experts take them: quantised once a token, not once a pair
        std::vector<float> xq(quant ? size_t(n * D) : 0), h, w1, w3, w2;
        for (int64_t t = 0; quant && t < n; ++t)
            fp8_block_quant_dequant_row(row_f32(a.x, t), D, xq.data() + t * D);
        auto dequant = [](const QWeight& w, std::vector<float>& out) {
            out.resize(size_t(w.out_dim * w.in_dim));
            for (int64_t r = 0; r < w.out_dim; ++r)
                for (int64_t c = 0; c < w.in_dim; ++c) out[size_t(r * w.in_dim + c)] = w.at(r, c);
        };
        for (int64_t e = 0; e < a.n_experts; ++e) {
            const std::vector<int64_t>& pairs = pairs_of[size_t(e)];
            if (pairs.empty()) continue;
            if (!a.owns(e)) {
                for (const int64_t pr : pairs) std::fill_n(pair_out + pr * D, D, 0.0f);
                continue;
            }
            const ExpertWeights& ew = a.experts[e];
            const int64_t I = ew.w1.out_dim;
            dequant(ew.w1, w1), dequant(ew.w3, w3), dequant(ew.w2, w2);
            h.resize(size_t(I));
            for (const int64_t pr : pairs) {
                const float* x = quant ? xq.data() + (pr / k) * D : row_f32(a.x, pr / k);
                for (int64_t r = 0; r < I; ++r) {
                    const float* g_row = w1.data() + r * D;
                    const float* u_row = w3.data() + r * D;
                    double g = 0, u = 0;
                    for (int64_t c = 0; c < D; ++c) {
                        g += double(x[c]) * g_row[c];
                        u += double(x[c]) * u_row[c];
                    }
                    const float gc = std::min(float(g), a.limit),
                                uc = std::clamp(float(u), -a.limit, a.limit);
                    h[size_t(r)] = float(double(gc) / (1.0 + std::exp(-double(gc))) * double(uc));
                }
                if (quant) fp8_block_quant_dequant_row(h.data(), I, h.data());
                float* d = pair_out + pr * D;
                for (int64_t c = 0; c < D; ++c) {
                    const float* w_row = w2.data() + c * I;
                    double dd = 0;
                    for (int64_t r = 0; r < I; ++r) dd += double(h[size_t(r)]) * w_row[r];
                    d[c] = float(dd);
                }
            }
        }
    }
    if (a.pass == Pass::kExperts) return;
    std::vector<double> acc(static_cast<size_t>(D));
    for (int64_t t = 0; t < n; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < k; ++j) {
            const float* d = pair_out + (t * k + j) * D;
            const double w = a.weights.ptr<float>()[t * a.weights.stride[0] + j];
            for (int64_t c = 0; c < D; ++c) acc[size_t(c)] += d[c] * w;
        }
        float* out = row_f32(a.out, t);
        for (int64_t c = 0; c < D; ++c) out[c] = float(acc[size_t(c)]);
    }
}

}  // namespace di::ops
