// mHC pre, post and head on the CPU. post is ref's double arithmetic in ref's order per element (the same
// bits), vectorised over the hidden columns and spread over tokens. The costly part, mix = fn . rms(streams)
// ((2 + hc) hc rows of hc * hidden), runs as fixed-order 8-lane double dot products, tokens in parallel;
// everything after it (sigmoids, the Sinkhorn iterations on hc x hc, the collapse) is ref's double arithmetic
// on a few values. The results equal ref's up to the order of the double sums (~1e-16 relative), i.e. within
// an ulp of float. bf16 streams are read through an f32 copy of the token's row, and post's f32 results
// rounded to bf16 as ref does.
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/cpu_kernels.h"

namespace di::ops {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Token t's hc * D stream values as f32: the row itself, or bf16's upcast into `buf`.
const float* stream_row(const TensorView& streams, int64_t t, std::vector<float>& buf) {
    const int64_t width = streams.shape[1] * streams.shape[2];
    if (streams.dtype == DType::kF32) return streams.ptr<float>() + t * width;
    buf.resize(size_t(width));
    const uint16_t* h = streams.ptr<uint16_t>() + t * width;
    for (int64_t i = 0; i < width; ++i) buf[size_t(i)] = bf16_to_f32(h[i]);
    return buf.data();
}

// mix = fn . (v * inv), inv = rsqrt(mean(v^2) + eps) rounded to float as ref; v * inv in float as ref.
void hc_mix(const float* v, int64_t width, const TensorView& fn, float eps, CpuScratch& s, double* mix) {
    const float inv = float(1.0 / std::sqrt(cpu::sumsq_f64(v, width) / double(width) + double(eps)));
    s.w.resize(size_t(width));
    for (int64_t i = 0; i < width; ++i) s.w[size_t(i)] = v[i] * inv;
    s.qrows.resize(size_t(fn.shape[0]));
    for (int64_t m = 0; m < fn.shape[0]; ++m) s.qrows[size_t(m)] = fn.ptr<float>() + m * fn.stride[0];
    cpu::dot_rows_f64(s.w.data(), s.qrows.data(), fn.shape[0], width, mix);
}

// out = sum_i pre_i * stream_i (ref's double sum over the hc streams), v a token's streams.
void collapse(const float* v, int64_t hc, int64_t D, const double* pre, float* out) {
    for (int64_t c = 0; c < D; ++c) {
        double acc = 0;
        for (int64_t i = 0; i < hc; ++i) acc += pre[i] * v[i * D + c];
        out[c] = float(acc);
    }
}

// ref: transformers 5.17 DeepseekV4HyperConnection.forward, after the mix (as ref_mhc.cpp).
void mhc_pre_token(const MhcPreArgs& a, int64_t t, const float* v, const double* mix) {
    const int64_t hc = a.streams.shape[1];
    const float* base = a.base.ptr<float>();
    const float* scale = a.scale.ptr<float>();
    double pre[16], C[256];
    for (int64_t i = 0; i < hc; ++i) {
        pre[i] = float(sigmoid(mix[i] * scale[0] + base[i]) + a.hc_eps);
        a.post.ptr<float>()[t * a.post.stride[0] + i] =
            float(2.0 * sigmoid(mix[hc + i] * scale[1] + base[hc + i]));
    }
    for (int64_t j = 0; j < hc; ++j) {
        double m = -INFINITY, sum = 0;
        for (int64_t k = 0; k < hc; ++k) {
            const int64_t idx = 2 * hc + j * hc + k;
            C[j * hc + k] = mix[idx] * scale[2] + base[idx];
            m = std::max(m, C[j * hc + k]);
        }
        for (int64_t k = 0; k < hc; ++k) sum += (C[j * hc + k] = std::exp(C[j * hc + k] - m));
        for (int64_t k = 0; k < hc; ++k) C[j * hc + k] = C[j * hc + k] / sum + a.hc_eps;
    }
    auto normalize = [&](bool cols) {
        for (int64_t x = 0; x < hc; ++x) {
            double sum = 0;
            for (int64_t y = 0; y < hc; ++y) sum += cols ? C[y * hc + x] : C[x * hc + y];
            for (int64_t y = 0; y < hc; ++y) (cols ? C[y * hc + x] : C[x * hc + y]) /= (sum + a.hc_eps);
        }
    };
    normalize(true);
    for (int it = 0; it < a.sinkhorn_iters - 1; ++it) {
        normalize(false);
        normalize(true);
    }
    float* comb = a.comb.ptr<float>() + t * a.comb.stride[0];
    for (int64_t i = 0; i < hc * hc; ++i) comb[i] = float(C[i]);
    collapse(v, hc, a.streams.shape[2], pre, a.x.ptr<float>() + t * a.x.stride[0]);
}

}  // namespace

void CpuBackend::mhc_pre(const MhcPreArgs& a) {
    if (!take_fast(cpu_fast_index("mhc_pre"))) return ref_->mhc_pre(a);
    check(a);
    const int64_t n = a.streams.shape[0], hc = a.streams.shape[1];
    DI_CHECK(hc <= 16, "mhc_pre: hc_mult {} > 16", hc);
    const int64_t work = a.fn.shape[0] * a.fn.shape[1];
    pool_.parallel_for(n, work * n < cpu::kMinParallelMacs ? n : 1, [&](int64_t t0, int64_t t1, int worker) {
        CpuScratch& s = scratch_[size_t(worker)];
        double mix[16 * 18];
        for (int64_t t = t0; t < t1; ++t) {
            const float* v = stream_row(a.streams, t, s.hc_in);
            hc_mix(v, a.fn.shape[1], a.fn, a.norm_eps, s, mix);
            mhc_pre_token(a, t, v, mix);
        }
    });
}

// ref: transformers 5.17 DeepseekV4HyperHead.forward
void CpuBackend::hc_head(const HcHeadArgs& a) {
    if (!take_fast(cpu_fast_index("hc_head"))) return ref_->hc_head(a);
    check(a);
    const int64_t n = a.streams.shape[0], hc = a.streams.shape[1];
    DI_CHECK(hc <= 16, "hc_head: hc_mult {} > 16", hc);
    const int64_t work = a.fn.shape[0] * a.fn.shape[1];
    pool_.parallel_for(n, work * n < cpu::kMinParallelMacs ? n : 1, [&](int64_t t0, int64_t t1, int worker) {
        CpuScratch& s = scratch_[size_t(worker)];
        double mix[16], pre[16];
        for (int64_t t = t0; t < t1; ++t) {
            const float* v = stream_row(a.streams, t, s.hc_in);
            hc_mix(v, a.fn.shape[1], a.fn, a.norm_eps, s, mix);
            for (int64_t i = 0; i < hc; ++i)
                pre[i] = float(sigmoid(mix[i] * a.scale.ptr<float>()[0] + a.base.ptr<float>()[i]) + a.hc_eps);
            collapse(v, hc, a.streams.shape[2], pre, a.out.ptr<float>() + t * a.out.stride[0]);
        }
    });
}

namespace {

// One token of mhc_post: out[k, c] = post[k] sub[c] + sum_j comb[j, k] x[j, c] in double, j in order (ref's
// expression per element; acc: D doubles), the columns in vector lanes of each x86-64 level.
DI_CPU_CLONES void post_token(const float* post, const float* comb, const float* x, const float* sub,
                              int64_t hc, int64_t D, double* acc, float* out) {
    for (int64_t k = 0; k < hc; ++k) {
        const double pk = post[k];
        for (int64_t c = 0; c < D; ++c) acc[c] = pk * sub[c];
        for (int64_t j = 0; j < hc; ++j) {
            const double cj = comb[j * hc + k];
            const float* xj = x + j * D;
            for (int64_t c = 0; c < D; ++c) acc[c] += cj * xj[c];
        }
        for (int64_t c = 0; c < D; ++c) out[k * D + c] = float(acc[c]);
    }
}

}  // namespace

// out[t, k, c] = post[t, k] a[t, c] + sum_j comb[t, j, k] streams[t, j, c] per token, tokens over the pool.
void CpuBackend::mhc_post(const MhcPostArgs& a) {
    if (!take_fast(cpu_fast_index("mhc_post"))) return ref_->mhc_post(a);
    check(a);
    const int64_t n = a.streams.shape[0], hc = a.streams.shape[1], D = a.streams.shape[2];
    pool_.parallel_for(
        n, n * hc * hc * D < cpu::kMinParallelMacs ? n : 1, [&](int64_t t0, int64_t t1, int w) {
            CpuScratch& s = scratch_[size_t(w)];
            s.post.resize(size_t(D));
            const bool bf16 = a.out.dtype == DType::kBF16;
            if (bf16) s.hc_out.resize(size_t(hc * D));
            for (int64_t t = t0; t < t1; ++t) {
                float* out = bf16 ? s.hc_out.data() : a.out.ptr<float>() + t * hc * D;
                post_token(a.post.ptr<float>() + t * a.post.stride[0],
                           a.comb.ptr<float>() + t * a.comb.stride[0], stream_row(a.streams, t, s.hc_in),
                           a.a.ptr<float>() + t * a.a.stride[0], hc, D, s.post.data(), out);
                if (bf16)
                    for (int64_t i = 0; i < hc * D; ++i)
                        a.out.ptr<uint16_t>()[t * hc * D + i] = f32_to_bf16(out[i]);
            }
        });
}

}  // namespace di::ops
