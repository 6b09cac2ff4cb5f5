#include "cpu_test_util.h"

#include <cstdio>
#include <cstring>

namespace di::cputest {

Backends& backends() {
    static Backends b;
    return b;
}

std::mt19937& rng() {
    static std::mt19937 r(20261130);
    return r;
}

void fill_uniform(const TensorView& v, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    const int64_t n = v.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float x = v.dtype == DType::kF16 ? 0.0f : u(rng());
        if (v.dtype == DType::kF32) {
            v.ptr<float>()[i] = x;
        } else if (v.dtype == DType::kBF16) {
            v.ptr<uint16_t>()[i] = f32_to_bf16(x);
        } else {
            ASSERT_EQ(v.dtype, DType::kF16);
            // Random half bits: exponent 0 (subnormal) .. 14 (|x| < 1), any mantissa and sign.
            const uint32_t bits = rng()();
            v.ptr<uint16_t>()[i] = uint16_t((bits & 0x83ffu) | ((bits >> 16) % 15) << 10);
        }
    }
}

void fill_fp8(const TensorView& v) {
    auto* b = static_cast<uint8_t*>(v.data);
    for (size_t i = 0; i < v.nbytes(); ++i) {
        uint8_t x = uint8_t(rng()() & 0xff);
        if ((x & 0x7f) == 0x7f) x &= 0xfe;
        b[i] = x;
    }
}

void fill_bytes(const TensorView& v) {
    auto* b = static_cast<uint8_t*>(v.data);
    for (size_t i = 0; i < v.nbytes(); ++i) b[i] = uint8_t(rng()() & 0xff);
}

void fill_e8m0(const TensorView& v) {
    auto* b = static_cast<uint8_t*>(v.data);
    for (size_t i = 0; i < v.nbytes(); ++i) b[i] = uint8_t(121 + rng()() % 7);
}

void poison(const TensorView& v) { std::memset(v.data, 0xff, v.nbytes()); }

TestWeight make_weight(ops::WeightFormat fmt, int64_t out, int64_t in, DType dense_dt, DType scale_dt) {
    TestWeight t;
    if (fmt == ops::WeightFormat::kDense) {
        t.data = Tensor(host_allocator(), dense_dt, {out, in});
        fill_uniform(t.data, -0.1f, 0.1f);
    } else if (fmt == ops::WeightFormat::kFp8Block) {
        t.data = Tensor(host_allocator(), DType::kF8E4M3, {out, in});
        fill_fp8(t.data);
        t.scale = Tensor(host_allocator(), scale_dt, {(out + 127) / 128, (in + 127) / 128});
    } else {
        t.data = Tensor(host_allocator(), DType::kFP4x2, {out, in / 2});
        fill_bytes(t.data);
        t.scale = Tensor(host_allocator(), scale_dt, {out, (in + 31) / 32});
    }
    if (fmt != ops::WeightFormat::kDense) {
        if (scale_dt == DType::kE8M0)
            fill_e8m0(t.scale);
        else
            fill_uniform(t.scale, 0.01f, 0.1f);
    }
    t.w.format = fmt;
    t.w.data = t.data.view();
    if (fmt != ops::WeightFormat::kDense) t.w.scale = t.scale.view();
    t.w.out_dim = out;
    t.w.in_dim = in;
    return t;
}

void expect_within(const std::vector<float>& want, const std::vector<float>& got,
                   const std::vector<double>& bound, const std::string& what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    ASSERT_EQ(want.size(), bound.size()) << what;
    int64_t bad = 0, worst = -1;
    double worst_ratio = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double err = std::fabs(double(got[i]) - double(want[i]));
        const bool ok = !std::isnan(got[i]) && !std::isnan(want[i]) && err <= bound[i];
        if (!ok) ++bad;
        const double ratio = std::isnan(err) ? INFINITY : err / std::max(bound[i], 1e-300);
        if (worst < 0 || ratio > worst_ratio) worst_ratio = ratio, worst = int64_t(i);
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size()
                      << " elements outside the bound; worst #" << worst << " ref " << want[size_t(worst)]
                      << " cpu " << got[size_t(worst)] << " bound " << bound[size_t(worst)];
    // Second, sharper check on the whole output: rounding errors of random sign grow like sqrt(terms) while
    // the bounds above are worst cases; a systematic error (a wrong scale, a dropped term) shows up here.
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double e = double(got[i]) - double(want[i]);
        num += e * e, den += double(want[i]) * want[i];
    }
    const double rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    EXPECT_LE(rel_l2, 1e-5) << what << ": relative L2 error";
    std::printf("%s: worst |cpu - ref| / bound = %.3g, relative L2 error %.3g\n", what.c_str(), worst_ratio,
                rel_l2);
}

std::vector<float> to_vector(const TensorView& v) {
    std::vector<float> out(size_t(v.numel()));
    for (int64_t i = 0; i < v.numel(); ++i) out[size_t(i)] = load_float(v.data, v.dtype, i);
    return out;
}

}  // namespace di::cputest
