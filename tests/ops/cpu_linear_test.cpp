// linear on cpu vs ref on the cpu cases of the linear table (ops/op_cases.h): every weight format (f32, bf16,
// f16, fp8 with e8m0 and f32 scales, fp4), V4-Flash shapes, odd sizes, 1 row, an empty batch, strided x and y
// rows and a row-sliced weight (the grouped output projection). Bound per element, the table's kLinearCpu:
// float_sum_tol(in) * sum_i |x_i w_i|, computed here in double from QWeight::at.
#include <cstring>

#include "cpu_test_util.h"
#include "ops/op_cases.h"

namespace di::cputest {
namespace {

using ops::WeightFormat;

using ops::cases::LinearCase;
// The cpu cases of the linear table (ops/op_cases.h).
const std::vector<LinearCase> kCases = ops::cases::linear_cases(ops::cases::kCpuTest);

class CpuLinear : public ::testing::TestWithParam<LinearCase> {};

TEST_P(CpuLinear, MatchesRefWithinFloatSumBound) {
    const LinearCase& c = GetParam();
    TestWeight tw = make_weight(c.fmt, c.out + c.w_row0, c.in, c.dense_dt, c.scale_dt);
    const ops::QWeight w = c.w_row0 ? tw.w.rows(c.w_row0, c.out) : tw.w;
    Tensor x(host_allocator(), DType::kF32, {c.n, c.in + c.x_pad});
    Tensor y_ref(host_allocator(), DType::kF32, {c.n, c.out + c.y_pad});
    Tensor y_cpu(host_allocator(), DType::kF32, {c.n, c.out + c.y_pad});
    fill_uniform(x);
    poison(y_ref);
    poison(y_cpu);
    auto args = [&](const Tensor& y) {
        ops::LinearArgs a;
        a.x = x.view();
        a.x.shape[1] = c.in;  // the first `in` columns; row stride stays in + x_pad
        a.y = y.view();
        a.y.shape[1] = c.out;
        a.w = w;
        return a;
    };
    backends().ref->linear(args(y_ref));
    backends().cpu->linear(args(y_cpu));

    std::vector<float> want, got;
    std::vector<double> bound;
    const double tol = float_sum_tol(c.in);
    for (int64_t r = 0; r < c.n; ++r) {
        const float* xr = x.view().ptr<float>() + r * (c.in + c.x_pad);
        for (int64_t o = 0; o < c.out; ++o) {
            double abs_sum = 0;
            for (int64_t i = 0; i < c.in; ++i) abs_sum += std::fabs(double(xr[i]) * w.at(o, i));
            want.push_back(y_ref.view().ptr<float>()[r * (c.out + c.y_pad) + o]);
            got.push_back(y_cpu.view().ptr<float>()[r * (c.out + c.y_pad) + o]);
            bound.push_back(tol * abs_sum);
        }
        // The padding columns of y are not the op's: they must stay untouched.
        for (int64_t o = c.out; o < c.out + c.y_pad; ++o)
            ASSERT_TRUE(std::isnan(y_cpu.view().ptr<float>()[r * (c.out + c.y_pad) + o]))
                << "wrote y pad " << o;
    }
    expect_within(want, got, bound, c.name);
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuLinear, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<LinearCase>& i) {
                             return std::string(i.param.name);
                         });

// The fast dequantisation must equal QWeight::at exactly (the tolerance above assumes it): checked
// through a linear with one-hot x rows, which makes each output a single product 1 * w[o, i].
TEST(CpuLinearDequant, OneHotRowsReturnExactWeights) {
    const struct {
        WeightFormat fmt;
        DType dense_dt, scale_dt;
    } kFormats[] = {{WeightFormat::kDense, DType::kBF16, DType::kE8M0},
                    {WeightFormat::kDense, DType::kF16, DType::kE8M0},
                    {WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0},
                    {WeightFormat::kFp8Block, DType::kBF16, DType::kF32},
                    {WeightFormat::kFp4Group, DType::kBF16, DType::kE8M0},
                    {WeightFormat::kFp4Group, DType::kBF16, DType::kF32}};
    const int64_t in = 160, out = 130;
    for (const auto& f : kFormats) {
        TestWeight tw = make_weight(f.fmt, out, in, f.dense_dt, f.scale_dt);
        if (f.fmt == WeightFormat::kFp8Block) {  // every e4m3 code except NaN, subnormals included
            for (int64_t i = 0; i < out * in; ++i)
                tw.data.view().ptr<uint8_t>()[i] = uint8_t(i % 255 == 127 ? 0 : i % 255);
        }
        Tensor x = Tensor::zeros_host(DType::kF32, {in, in}), y(host_allocator(), DType::kF32, {in, out});
        for (int64_t i = 0; i < in; ++i) x.view().ptr<float>()[i * in + i] = 1.0f;
        backends().cpu->linear({x, tw.w, y});
        int64_t bad = 0;
        for (int64_t i = 0; i < in; ++i)
            for (int64_t o = 0; o < out; ++o) {
                const float got = y.view().ptr<float>()[i * out + o], want = tw.w.at(o, i);
                if (!(got == want)) ++bad;  // == : a -0 weight sums to +0
            }
        EXPECT_EQ(bad, 0) << "format " << int(f.fmt) << " dtype " << dtype_name(f.dense_dt) << " scale "
                          << dtype_name(f.scale_dt);
    }
}

// A bf16 y (the native q where a backend keeps it so): ref and cpu write their own f32 result rounded to the
// nearest bf16, ties to the even one, found here by comparing the two neighbouring bf16 values in double.
TEST(CpuLinearBf16Out, IsTheF32ResultRoundedToNearestEven) {
    const int64_t n = 5, in = 256, out = 136;
    TestWeight tw = make_weight(WeightFormat::kFp8Block, out, in);
    Tensor x(host_allocator(), DType::kF32, {n, in});
    fill_uniform(x, -4.0f, 4.0f);
    auto nearest = [](float f) {  // by search: the bf16 values just below and above f
        uint32_t u;
        std::memcpy(&u, &f, 4);
        const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
        float a, b;
        std::memcpy(&a, &lo, 4), std::memcpy(&b, &hi, 4);
        const double da = std::fabs(double(f) - a), db = std::fabs(double(f) - b);
        return da < db || (da == db && ((lo >> 16) & 1u) == 0) ? a : b;
    };
    for (ops::Backend* be : {static_cast<ops::Backend*>(backends().ref.get()),
                             static_cast<ops::Backend*>(backends().cpu.get())}) {
        SCOPED_TRACE(std::string(be->name()));
        for (const ops::ActQuant act : {ops::ActQuant::kNone, ops::ActQuant::kFp8Block128}) {
            Tensor y(host_allocator(), DType::kF32, {n, out}), y16(host_allocator(), DType::kBF16, {n, out});
            poison(y), poison(y16);
            ops::LinearArgs a{.x = x.view(), .w = tw.w, .y = y.view(), .act = act};
            be->linear(a);
            a.y = y16.view();
            be->linear(a);
            const std::vector<float> f = to_vector(y.view()), h = to_vector(y16.view());
            for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(h[i], nearest(f[i])) << i << " of " << f[i];
        }
    }
}

}  // namespace
}  // namespace di::cputest
