// Reference mHC: pre/post/comb with Sinkhorn, the transposed residual mix, and the final hc head.
#include <cmath>
#include <vector>

#include "ops/ref/ref_backend_impl.h"

namespace di::ops {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// mix = fn . rms(concat streams of token t), in double.
std::vector<double> hc_mix(const TensorView& streams, int64_t t, const TensorView& fn, float eps) {
    const int64_t width = streams.shape[1] * streams.shape[2];
    const float* v = streams.ptr<float>() + t * width;
    double ss = 0;
    for (int64_t i = 0; i < width; ++i) ss += double(v[i]) * v[i];
    const float inv = float(1.0 / std::sqrt(ss / double(width) + double(eps)));
    std::vector<double> mix(size_t(fn.shape[0]));
    for (int64_t m = 0; m < fn.shape[0]; ++m) {
        const float* f = row_f32(fn, m);
        double acc = 0;
        for (int64_t i = 0; i < width; ++i) acc += double(v[i] * inv) * f[i];
        mix[size_t(m)] = acc;
    }
    return mix;
}

// out = sum_i pre_i * stream_i for token t.
void collapse(const TensorView& streams, int64_t t, const std::vector<double>& pre, float* out) {
    const int64_t hc = streams.shape[1], D = streams.shape[2];
    const float* v = streams.ptr<float>() + t * hc * D;
    for (int64_t c = 0; c < D; ++c) {
        double acc = 0;
        for (int64_t i = 0; i < hc; ++i) acc += pre[size_t(i)] * v[i * D + c];
        out[c] = float(acc);
    }
}

}  // namespace

// ref: transformers 5.17 DeepseekV4HyperConnection.forward
void RefBackend::mhc_pre(const MhcPreArgs& a) {
    check(a);
    const int64_t hc = a.streams.shape[1];
    const float* base = a.base.ptr<float>();
    const float* scale = a.scale.ptr<float>();
    for (int64_t t = 0; t < a.streams.shape[0]; ++t) {
        const std::vector<double> mix = hc_mix(a.streams, t, a.fn, a.norm_eps);
        std::vector<double> pre(static_cast<size_t>(hc));
        for (int64_t i = 0; i < hc; ++i) {
            pre[size_t(i)] = float(sigmoid(mix[size_t(i)] * scale[0] + base[i]) + a.hc_eps);
            a.post.ptr<float>()[t * a.post.stride[0] + i] =
                float(2.0 * sigmoid(mix[size_t(hc + i)] * scale[1] + base[hc + i]));
        }
        std::vector<double> C(size_t(hc * hc));
        for (int64_t j = 0; j < hc; ++j) {  // row softmax of the comb logits, then + eps
            double m = -INFINITY, sum = 0;
            for (int64_t k = 0; k < hc; ++k) {
                const int64_t idx = 2 * hc + j * hc + k;
                C[size_t(j * hc + k)] = mix[size_t(idx)] * scale[2] + base[idx];
                m = std::max(m, C[size_t(j * hc + k)]);
            }
            for (int64_t k = 0; k < hc; ++k)
                sum += (C[size_t(j * hc + k)] = std::exp(C[size_t(j * hc + k)] - m));
            for (int64_t k = 0; k < hc; ++k) C[size_t(j * hc + k)] = C[size_t(j * hc + k)] / sum + a.hc_eps;
        }
        auto normalize_cols = [&] {
            for (int64_t k = 0; k < hc; ++k) {
                double s = 0;
                for (int64_t j = 0; j < hc; ++j) s += C[size_t(j * hc + k)];
                for (int64_t j = 0; j < hc; ++j) C[size_t(j * hc + k)] /= (s + a.hc_eps);
            }
        };
        auto normalize_rows = [&] {
            for (int64_t j = 0; j < hc; ++j) {
                double s = 0;
                for (int64_t k = 0; k < hc; ++k) s += C[size_t(j * hc + k)];
                for (int64_t k = 0; k < hc; ++k) C[size_t(j * hc + k)] /= (s + a.hc_eps);
            }
        };
        normalize_cols();
        for (int it = 0; it < a.sinkhorn_iters - 1; ++it) {
            normalize_rows();
            normalize_cols();
        }
        float* comb = a.comb.ptr<float>() + t * a.comb.stride[0];
        for (int64_t i = 0; i < hc * hc; ++i) comb[i] = float(C[size_t(i)]);
        collapse(a.streams, t, pre, row_f32(a.x, t));
    }
}

// ref: transformers 5.17 DeepseekV4DecoderLayer: post * a + comb^T @ streams
void RefBackend::mhc_post(const MhcPostArgs& a) {
    check(a);
    const int64_t hc = a.streams.shape[1], D = a.streams.shape[2];
    for (int64_t t = 0; t < a.streams.shape[0]; ++t) {
        const float* post = a.post.ptr<float>() + t * a.post.stride[0];
        const float* comb = a.comb.ptr<float>() + t * a.comb.stride[0];
        const float* x = a.streams.ptr<float>() + t * hc * D;
        const float* sub = row_f32(a.a, t);
        float* out = a.out.ptr<float>() + t * hc * D;
        for (int64_t k = 0; k < hc; ++k)
            for (int64_t c = 0; c < D; ++c) {
                double acc = double(post[k]) * sub[c];
                for (int64_t j = 0; j < hc; ++j) acc += double(comb[j * hc + k]) * x[j * D + c];
                out[k * D + c] = float(acc);
            }
    }
}

// ref: transformers 5.17 DeepseekV4HyperHead.forward
void RefBackend::hc_head(const HcHeadArgs& a) {
    check(a);
    const int64_t hc = a.streams.shape[1];
    for (int64_t t = 0; t < a.streams.shape[0]; ++t) {
        const std::vector<double> mix = hc_mix(a.streams, t, a.fn, a.norm_eps);
        std::vector<double> pre(static_cast<size_t>(hc));
        for (int64_t i = 0; i < hc; ++i)
            pre[size_t(i)] =
                float(sigmoid(mix[size_t(i)] * a.scale.ptr<float>()[0] + a.base.ptr<float>()[i]) + a.hc_eps);
        collapse(a.streams, t, pre, row_f32(a.out, t));
    }
}

}  // namespace di::ops
