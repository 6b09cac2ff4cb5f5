// The AMX tiles of the native precision (cpu_amx.cpp) against ref's linear on the same quantised rows, and
// the property the row groups rest on: a (token, weight row) sum of the tiles does not depend on the other
// rows of the call, whichever path (few tokens converted a chunk at a time with the scales in x, many tokens
// with the whole block converted and the scales in the weights, or the f32 tiles for scales the tiles cannot
// take) computed it. Skipped where the machine has no AMX.
#include <algorithm>
#include <cmath>

#include "cpu_test_util.h"
#include "ops/act_quant.h"
#include "ops/cpu/cpu_kernels.h"

namespace di::cputest {
namespace {

using ops::WeightFormat;

// Worst case of a tile sum: TDPBF16PS adds products to its f32 accumulator, at worst one rounding per
// pair of products (Intel does not state the order within an instruction), so (len / 2 + 6) u sum |x w|;
// f32 rows enter as three planes, three times the products.
double amx_sum_tol(int64_t len, int planes) {
    return (double(planes * len) / 2 + 6) * std::ldexp(1.0, -24) * 1.01;
}

struct Rows {
    Tensor x;  // quantised f32 [n, in]
    std::vector<const float*> ptr;
    std::vector<uint16_t> xv;
    ops::cpu::AmxX range;
};

// n rows: quantised as the native precision's (one plane), or f32 as they are (three planes).
Rows prepare(const ops::QWeight& w, int64_t n, int planes = 1, float lo = -2.0f, float hi = 2.0f) {
    Rows r;
    r.x = Tensor(host_allocator(), DType::kF32, {n, w.in_dim});
    fill_uniform(r.x.view(), lo, hi);
    for (int64_t t = 0; t < n; ++t) {
        float* row = r.x.view().ptr<float>() + t * w.in_dim;
        if (planes == 1) ops::fp8_block_quant_dequant_row(row, w.in_dim, row);
        r.ptr.push_back(row);
    }
    r.xv.resize(size_t(planes * n * w.in_dim));
    r.range = ops::cpu::amx_prepare_x(w, r.ptr.data(), n, planes, r.xv.data());
    return r;
}

// All out rows for rows [t0, t0 + n) of r (the tiles' layout prepared for just those rows).
std::vector<float> amx(const ops::QWeight& w, const Rows& r, int64_t t0, int64_t n) {
    std::vector<const float*> ptr(r.ptr.begin() + t0, r.ptr.begin() + t0 + n);
    const int planes = r.range.planes;
    std::vector<uint16_t> xv(size_t(planes * n * w.in_dim));
    const ops::cpu::AmxX range = ops::cpu::amx_prepare_x(w, ptr.data(), n, planes, xv.data());
    std::vector<float> y(size_t(n * w.out_dim));
    ops::CpuScratch s;
    for (int64_t o0 = 0; o0 < w.out_dim; o0 += 64)  // two blocks a task, as the backend splits them
        ops::cpu::amx_rows(w, o0, std::min(w.out_dim, o0 + 64), xv.data(), range, ptr.data(), n,
                           y.data() + o0, w.out_dim, s);
    return y;
}

void check_against_ref(const ops::QWeight& w, int64_t n, const std::string& what, int planes = 1) {
    Rows r = prepare(w, n, planes);
    Tensor want(host_allocator(), DType::kF32, {n, w.out_dim});
    backends().ref->linear({.x = r.x.view(), .w = w, .y = want.view()});
    const std::vector<float> got = amx(w, r, 0, n);
    std::vector<double> bound;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t o = 0; o < w.out_dim; ++o) {
            double abs_sum = 0;
            for (int64_t i = 0; i < w.in_dim; ++i)
                abs_sum += std::fabs(double(r.ptr[size_t(t)][i]) * w.at(o, i));
            bound.push_back(amx_sum_tol(w.in_dim, planes) * abs_sum);
        }
    expect_within(to_vector(want.view()), got, bound, what);
}

bool no_amx() { return !ops::cpu::amx_enabled(); }

TEST(AmxRows, EqualRefLinearOnQuantisedAndF32Rows) {
    if (no_amx()) GTEST_SKIP() << "no AMX here";
    // 1 token, 5 (one group, chunked conversion), 33 (16 + 16 + 1 past a pass), 40; partial 32-row blocks
    for (auto [n, in, out] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 4096, 70}, {5, 512, 96}, {33, 1024, 64}, {40, 256, 33}}) {
        for (WeightFormat fmt : {WeightFormat::kFp8Block, WeightFormat::kFp4Group, WeightFormat::kDense}) {
            SCOPED_TRACE(testing::Message()
                         << "n " << n << " in " << in << " out " << out << " fmt " << int(fmt));
            TestWeight tw = make_weight(fmt, out, in);  // dense: bf16
            ASSERT_TRUE(ops::cpu::amx_supported(tw.w));
            if (fmt != WeightFormat::kDense) check_against_ref(tw.w, n, "amx rows, quantised x");
            check_against_ref(tw.w, n, "amx rows, f32 x in three planes", 3);
        }
    }
}

// Rows 0-4 alone (x scaled per scale row, chunks converted), in a call of 40 (weights scaled, the block
// converted once) and token 3 alone: the same bits.
TEST(AmxRows, ASumDoesNotDependOnTheOtherRows) {
    if (no_amx()) GTEST_SKIP() << "no AMX here";
    for (auto [fmt, planes] : {std::pair{WeightFormat::kFp8Block, 1},
                               {WeightFormat::kFp4Group, 1},
                               {WeightFormat::kFp8Block, 3},
                               {WeightFormat::kDense, 3}}) {
        SCOPED_TRACE(testing::Message() << int(fmt) << " planes " << planes);
        TestWeight tw = make_weight(fmt, 200, 1024);
        Rows r = prepare(tw.w, 40, planes);
        const std::vector<float> all = amx(tw.w, r, 0, 40), five = amx(tw.w, r, 0, 5),
                                 one = amx(tw.w, r, 3, 1);
        EXPECT_TRUE(std::equal(five.begin(), five.end(), all.begin())) << "rows 0-4 of 40 against 5";
        EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + 3 * 200)) << "row 3 alone";
    }
}

// fp8 rows that cannot carry the weights' scales (2^-110: x's smallest quantised values, near 2^-31 as the
// quantiser floors a block's scale, times 2^-110 are not normal bf16) keep the scales in the weights: three
// rows alone (the few-token path, which otherwise scales x) give the bits of the same rows inside a call of
// 40 (the many-token path).
TEST(AmxRows, RowsTooSmallToScaleKeepTheScalesInTheWeights) {
    if (no_amx()) GTEST_SKIP() << "no AMX here";
    TestWeight tw = make_weight(WeightFormat::kFp8Block, 64, 256);
    for (int64_t i = 0; i < tw.scale.view().numel(); ++i) tw.scale.view().ptr<uint8_t>()[i] = 127 - 110;
    Rows r = prepare(tw.w, 40, 1, -1e-3f, 1e-3f);
    EXPECT_LT(r.range.lo, 110);  // exponent fields of x that x * 2^-110 would take below 1
    const std::vector<float> all = amx(tw.w, r, 0, 40), three = amx(tw.w, r, 0, 3);
    EXPECT_TRUE(std::equal(three.begin(), three.end(), all.begin()));
    EXPECT_TRUE(std::any_of(three.begin(), three.end(), [](float v) { return v != 0.0f; }));
}

// A scale the tiles cannot take (fp8 2^-122, an fp4 group 2^-126) sends that block to the f32 tiles: ref's
// values within the cpu sum bound, and the other blocks' rows unchanged.
TEST(AmxRows, ScalesOutOfRangeTakeTheF32Tiles) {
    if (no_amx()) GTEST_SKIP() << "no AMX here";
    for (WeightFormat fmt : {WeightFormat::kFp8Block, WeightFormat::kFp4Group}) {
        SCOPED_TRACE(int(fmt));
        TestWeight tw = make_weight(fmt, 160, 256);
        Rows r = prepare(tw.w, 6);
        const std::vector<float> before = amx(tw.w, r, 0, 6);
        // fp8: scale row 1 (weight rows 128-159); fp4: row 140's first group
        tw.scale.view().ptr<uint8_t>()[fmt == WeightFormat::kFp8Block ? tw.scale.view().stride[0]
                                                                      : 140 * tw.scale.view().stride[0]] =
            fmt == WeightFormat::kFp8Block ? 5 : 1;
        const std::vector<float> after = amx(tw.w, r, 0, 6);
        for (int64_t t = 0; t < 6; ++t)
            EXPECT_TRUE(
                std::equal(after.begin() + t * 160, after.begin() + t * 160 + 128, before.begin() + t * 160))
                << "rows 0-127 of token " << t;
        check_against_ref(tw.w, 6, "f32 block");
    }
}

}  // namespace
}  // namespace di::cputest
