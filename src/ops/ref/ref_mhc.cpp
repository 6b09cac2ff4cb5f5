// Reference mHC: pre/post/comb with Sinkhorn, the transposed residual mix, and the final hc head.
#include <cmath>
#include <vector>

#include "ops/ref/ref_backend_impl.h"

namespace di::ops {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Token t's hc * D stream values as f32 (bf16 streams upcast).
std::vector<float> stream_row(const TensorView& streams, int64_t t) {
    const int64_t width = streams.shape[1] * streams.shape[2];
    std::vector<float> v(static_cast<size_t>(width));
    for (int64_t i = 0; i < width; ++i) v[size_t(i)] = load_float(streams.data, streams.dtype, t * width + i);
    return v;
}

// mix = fn . rms(v), v a token's concatenated streams, in double.
std::vector<double> hc_mix(const std::vector<float>& v, const TensorView& fn, float eps) {
    const int64_t width = int64_t(v.size());
    double ss = 0;
    for (float x : v) ss += double(x) * x;
    const float inv = float(1.0 / std::sqrt(ss / double(width) + double(eps)));
    std::vector<double> mix(size_t(fn.shape[0]));
    for (int64_t m = 0; m < fn.shape[0]; ++m) {
        const float* f = row_f32(fn, m);
        double acc = 0;
        for (int64_t i = 0; i < width; ++i) acc += double(v[size_t(i)] * inv) * f[i];
        mix[size_t(m)] = acc;
    }
    return mix;
}

// out = sum_i pre_i * stream_i for a token's streams v.
void collapse(const std::vector<float>& v, int64_t D, const std::vector<double>& pre, float* out) {
    const int64_t hc = int64_t(pre.size());
    for (int64_t c = 0; c < D; ++c) {
        double acc = 0;
        for (int64_t i = 0; i < hc; ++i) acc += pre[size_t(i)] * v[size_t(i * D + c)];
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
        const std::vector<float> v = stream_row(a.streams, t);
        const std::vector<double> mix = hc_mix(v, a.fn, a.norm_eps);
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
        collapse(v, a.streams.shape[2], pre, row_f32(a.x, t));
    }
}

// ref: transformers 5.17 DeepseekV4DecoderLayer: post * a + comb^T @ streams
void RefBackend::mhc_post(const MhcPostArgs& a) {
    check(a);
    const int64_t hc = a.streams.shape[1], D = a.streams.shape[2];
    for (int64_t t = 0; t < a.streams.shape[0]; ++t) {
        const float* post = a.post.ptr<float>() + t * a.post.stride[0];
        const float* comb = a.comb.ptr<float>() + t * a.comb.stride[0];
        const std::vector<float> x = stream_row(a.streams, t);
        const float* sub = row_f32(a.a, t);
        for (int64_t k = 0; k < hc; ++k)
            for (int64_t c = 0; c < D; ++c) {
                double acc = double(post[k]) * sub[c];
                for (int64_t j = 0; j < hc; ++j) acc += double(comb[j * hc + k]) * x[size_t(j * D + c)];
                store_float(a.out.data, a.out.dtype, (t * hc + k) * D + c, float(acc));
            }
    }
}

// ref: transformers 5.17 DeepseekV4HyperHead.forward
void RefBackend::hc_head(const HcHeadArgs& a) {
    check(a);
    const int64_t hc = a.streams.shape[1];
    for (int64_t t = 0; t < a.streams.shape[0]; ++t) {
        const std::vector<float> v = stream_row(a.streams, t);
        const std::vector<double> mix = hc_mix(v, a.fn, a.norm_eps);
        std::vector<double> pre(static_cast<size_t>(hc));
        for (int64_t i = 0; i < hc; ++i)
            pre[size_t(i)] =
                float(sigmoid(mix[size_t(i)] * a.scale.ptr<float>()[0] + a.base.ptr<float>()[i]) + a.hc_eps);
        collapse(v, a.streams.shape[2], pre, row_f32(a.out, t));
    }
}

}  // namespace di::ops
