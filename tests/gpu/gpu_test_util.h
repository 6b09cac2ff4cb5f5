// Helpers for the CUDA op tests: paired host/device tensors with seeded random contents, and comparison of a
// CUDA result against the reference backend's by relative L2 error (NaN never passes).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ops/cuda/cuda_backend.h"
#include "ops/ref/ref_backend.h"

namespace di::gputest {

struct Backends {
    std::unique_ptr<ops::Backend> ref = ops::make_ref_backend();
    std::unique_ptr<ops::Backend> gpu = ops::make_cuda_backend(0);
};
Backends& backends();  // one pair per process

// The same tensor on the host (for ref) and on the device (for cuda).
struct Pair {
    Tensor h, d;
    Pair() = default;
    Pair(DType dt, std::initializer_list<int64_t> shape)
        : h(host_allocator(), dt, shape), d(backends().gpu->allocator(), dt, shape) {}
    TensorView hv() const { return h.view(); }
    TensorView dv() const { return d.view(); }
    void upload() { backends().gpu->copy(d, h); }
    // Fills both copies with NaN bytes, so an element the op does not write cannot pass.
    void poison() {
        std::memset(h.view().data, 0xff, h.view().nbytes());
        upload();
    }
    // The values as f32 (f32, bf16 or f16 tensors).
    std::vector<float> host_f32() const { return as_f32(h.view()); }
    std::vector<float> device_f32() const {
        Tensor t(host_allocator(), d.view().dtype, {d.view().numel()});
        backends().gpu->copy(t, d.view().reshape({d.view().numel()}));
        return as_f32(t.view());
    }
    static std::vector<float> as_f32(const TensorView& v) {
        std::vector<float> out(size_t(v.numel()));
        for (int64_t i = 0; i < v.numel(); ++i) out[size_t(i)] = load_float(v.data, v.dtype, i);
        return out;
    }
    template <class T>
    std::vector<T> device_as() const {
        std::vector<T> v(size_t(d.view().nbytes() / sizeof(T)));
        Tensor t(host_allocator(), d.view().dtype, {d.view().numel()});
        backends().gpu->copy(t, d.view().reshape({d.view().numel()}));
        std::memcpy(v.data(), t.view().data, v.size() * sizeof(T));
        return v;
    }
};

inline std::mt19937& rng() {
    static std::mt19937 r(1234);
    return r;
}

// Uniform values in [lo, hi) written in the tensor's dtype (floats) or raw random bytes (packed formats).
inline void fill_uniform(Pair& p, float lo = -1.0f, float hi = 1.0f) {
    const TensorView v = p.hv();
    std::uniform_real_distribution<float> u(lo, hi);
    const int64_t n = v.numel();
    switch (v.dtype) {
        case DType::kF32:
            for (int64_t i = 0; i < n; ++i) v.ptr<float>()[i] = u(rng());
            break;
        case DType::kBF16:
            for (int64_t i = 0; i < n; ++i) v.ptr<uint16_t>()[i] = f32_to_bf16(u(rng()));
            break;
        default: {
            auto* b = static_cast<uint8_t*>(v.data);
            for (int64_t i = 0; i < int64_t(v.nbytes()); ++i) b[i] = uint8_t(rng()() & 0xff);
        }
    }
    p.upload();
}

// Random fp8 e4m3 bytes without NaN (0x7f / 0xff), and e8m0 scales near 2^-6 .. 2^0.
inline void fill_fp8(Pair& p) {
    auto* b = static_cast<uint8_t*>(p.hv().data);
    for (size_t i = 0; i < p.hv().nbytes(); ++i) {
        uint8_t x = uint8_t(rng()() & 0xff);
        if ((x & 0x7f) == 0x7f) x &= 0xfe;
        b[i] = x;
    }
    p.upload();
}
inline void fill_e8m0(Pair& p) {
    auto* b = static_cast<uint8_t*>(p.hv().data);
    for (size_t i = 0; i < p.hv().nbytes(); ++i) b[i] = uint8_t(121 + rng()() % 7);
    p.upload();
}

struct Diff {
    double rel_l2 = 0, max_abs = 0;
    int64_t nan = 0;
};
inline Diff diff(const std::vector<float>& ref, const std::vector<float>& got) {
    Diff d;
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (std::isnan(got[i]) != std::isnan(ref[i])) ++d.nan;
        if (std::isnan(got[i]) || std::isnan(ref[i])) continue;
        const double e = double(got[i]) - ref[i];
        num += e * e;
        den += double(ref[i]) * ref[i];
        d.max_abs = std::max(d.max_abs, std::abs(e));
    }
    d.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    return d;
}

// Expects the device copy of `p` to match its host copy (written by ref) within rel_tol.
inline void expect_close(const Pair& p, double rel_tol, const std::string& what) {
    const Diff d = diff(p.host_f32(), p.device_f32());
    EXPECT_EQ(d.nan, 0) << what << ": NaN in one result only (unwritten element?)";
    EXPECT_LE(d.rel_l2, rel_tol) << what << ": max abs err " << d.max_abs;
}

// One case of an op's case table run on one kernel variant ("" = the default dispatch), and every case on
// every variant, for TEST_P tables; VariantRunName names them "<case>_<variant>" ("default" for "").
template <class Case>
struct VariantRun {
    Case c;
    const char* variant;
};
template <class Case>
std::vector<VariantRun<Case>> variant_runs(std::span<const Case> cases,
                                           std::initializer_list<const char*> variants) {
    std::vector<VariantRun<Case>> v;
    for (const Case& c : cases)
        for (const char* var : variants) v.push_back({c, var});
    return v;
}
template <class Case, size_t N>
std::vector<VariantRun<Case>> variant_runs(const Case (&cases)[N],
                                           std::initializer_list<const char*> variants) {
    return variant_runs(std::span<const Case>(cases), variants);
}
template <class Case>
std::vector<VariantRun<Case>> variant_runs(const std::vector<Case>& cases,
                                           std::initializer_list<const char*> variants) {
    return variant_runs(std::span<const Case>(cases), variants);
}
struct VariantRunName {
    template <class P>
    std::string operator()(const ::testing::TestParamInfo<P>& tp) const {
        const std::string v = tp.param.variant;
        return std::string(tp.param.c.name) + "_" + (v.empty() ? std::string("default") : v);
    }
};

}  // namespace di::gputest
