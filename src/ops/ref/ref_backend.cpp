// Reference backend: memory helpers and the small element-wise ops.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/ref/ref_backend_impl.h"

namespace di::ops {

std::unique_ptr<Backend> make_ref_backend() { return std::make_unique<RefBackend>(); }

void RefBackend::copy(const TensorView& dst, const TensorView& src) {
    DI_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.nbytes() == src.nbytes(), "copy {} <- {}",
             dst.describe(), src.describe());
    DI_CHECK(dst.device == Device::kHost && src.device == Device::kHost,
             "ref backend copies host memory only");
    std::memmove(dst.data, src.data, dst.nbytes());
}

void RefBackend::fill_zero(const TensorView& dst) {
    DI_CHECK(dst.is_contiguous(), "fill_zero of non-contiguous {}", dst.describe());
    std::memset(dst.data, 0, dst.nbytes());
}

void RefBackend::embed(const EmbedArgs& a) {
    check(a);
    const int64_t vocab = a.table.shape[0], dim = a.table.shape[1];
    for (int64_t t = 0; t < a.tokens.numel(); ++t) {
        const int32_t id = a.tokens.ptr<int32_t>()[t];
        DI_CHECK(id >= 0 && id < vocab, "token id {} outside vocabulary of {}", id, vocab);
        for (int64_t c = 0; c < dim; ++c)
            store_float(a.out.data, a.out.dtype, t * a.out.stride[0] + c,
                        load_float(a.table.data, a.table.dtype, id * a.table.stride[0] + c));
    }
}

void RefBackend::add(const AddArgs& a) {
    check(a);
    for (int64_t r = 0; r < a.a.shape[0]; ++r) {
        const float *x = row_f32(a.a, r), *y = row_f32(a.b, r);
        float* o = row_f32(a.out, r);
        for (int64_t c = 0; c < a.a.shape[1]; ++c) o[c] = x[c] + y[c];
    }
}

// ref: transformers 5.17 DeepseekV4MLP / DeepseekV4Experts._apply_gate: silu(gate.clamp(max=L)) *
// up.clamp(-L, L)
void RefBackend::swiglu(const SwigluArgs& a) {
    check(a);
    const float L = a.limit;
    for (int64_t r = 0; r < a.gate.shape[0]; ++r) {
        const float *g = row_f32(a.gate, r), *u = row_f32(a.up, r);
        float* o = row_f32(a.out, r);
        for (int64_t c = 0; c < a.gate.shape[1]; ++c) {
            const float gc = std::min(g[c], L), uc = std::clamp(u[c], -L, L);
            o[c] = float(double(gc) / (1.0 + std::exp(-double(gc))) * double(uc));
        }
    }
}

// ref: transformers 5.17 DeepseekV4RMSNorm / DeepseekV4UnweightedRMSNorm
void RefBackend::rms_norm(const RmsNormArgs& a) {
    check(a);
    const int64_t d = a.x.shape[1];
    for (int64_t r = 0; r < a.x.shape[0]; ++r) {
        const float* x = row_f32(a.x, r);
        double ss = 0;
        for (int64_t c = 0; c < d; ++c) ss += double(x[c]) * x[c];
        const float inv = float(1.0 / std::sqrt(ss / double(d) + double(a.eps)));
        float* y = row_f32(a.y, r);
        for (int64_t c = 0; c < d; ++c) {
            const float w = a.weight.empty() ? 1.0f : load_float(a.weight.data, a.weight.dtype, c);
            y[c] = x[c] * inv * w;
        }
    }
}

// ref: transformers 5.17 DeepseekV4RotaryEmbedding.forward + apply_rotary_pos_emb (interleaved, trailing
// dims)
void RefBackend::rope(const RopeArgs& a) {
    check(a);
    const int64_t half = a.inv_freq.numel(), hd = a.x.shape[2], c0 = hd - 2 * half;
    const float* inv_freq = a.inv_freq.ptr<float>();
    for (int64_t t = 0; t < a.x.shape[0]; ++t) {
        const float pos = float(a.positions.ptr<int32_t>()[t]);
        for (int64_t i = 0; i < half; ++i) {
            const float angle = pos * inv_freq[i];
            const float cs = float(std::cos(double(angle))) * a.mscale;
            float sn = float(std::sin(double(angle))) * a.mscale;
            if (a.inverse) sn = -sn;
            for (int64_t h = 0; h < a.x.shape[1]; ++h) {
                float* x = a.x.at<float>(t, h) + c0 + 2 * i;
                const float u = x[0], v = x[1];
                x[0] = u * cs - v * sn;
                x[1] = v * cs + u * sn;
            }
        }
    }
}

}  // namespace di::ops
