// top_candidates on CUDA (one block a row: a radix select of the C-th best key, then a sort) against the host
// rows (ops/sampling.h's reference): the ids and values exactly, the first non-finite index exactly, the sums
// within recursive summation's error bound of the host's (block-reduction order against id order); ties
// (small integers), the V4 vocabulary, strided rows, C from 1 to 1,024 and C = V, temperatures 0 (no sum_t)
// and above.
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "gpu_test_util.h"

namespace di::gputest {
namespace {

struct TopCase {
    const char* name;
    int64_t n, V, pad, C;
    bool ties, specials;
};

class CudaTopCandidates : public ::testing::TestWithParam<TopCase> {};

TEST_P(CudaTopCandidates, MatchesTheHostRows) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const TopCase& c = GetParam();
    auto& b = backends();
    const int64_t ld = c.V + c.pad;
    Pair x(DType::kF32, {c.n, ld}), temp(DType::kF32, {c.n}), ids(DType::kI32, {c.n, c.C}),
        values(DType::kF32, {c.n, c.C}), sums(DType::kI64, {c.n, 3}), bad(DType::kI32, {c.n});
    fill_uniform(x, -6, 6);
    float* h = x.hv().ptr<float>();
    if (c.ties)
        for (int64_t i = 0; i < c.n * ld; ++i) h[i] = std::round(h[i]);
    if (c.specials)  // every third row clean; the others a NaN or an infinity somewhere
        for (int64_t r = 0; r < c.n; ++r)
            if (r % 3 != 2)
                h[r * ld + (r * 7919) % c.V] =
                    r % 3 == 0 ? std::nanf("") : std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < c.n; ++r) temp.hv().ptr<float>()[r] = std::array{0.0f, 0.7f, 1.3f}[size_t(r % 3)];
    x.upload(), temp.upload();
    ids.poison(), values.poison(), sums.poison(), bad.poison();
    auto args = [&](bool d) {
        TensorView xv = d ? x.dv() : x.hv();
        xv.shape[1] = c.V;  // the first V columns; row stride V + pad
        return ops::TopCandidatesArgs{xv,
                                      d ? temp.dv() : temp.hv(),
                                      d ? ids.dv() : ids.hv(),
                                      d ? values.dv() : values.hv(),
                                      d ? sums.dv() : sums.hv(),
                                      d ? bad.dv() : bad.hv()};
    };
    b.ref->top_candidates(args(false));
    b.gpu->top_candidates(args(true));
    const std::vector<int32_t> gi = ids.device_as<int32_t>(), gb = bad.device_as<int32_t>();
    const std::vector<float> gv = values.device_as<float>();
    const std::vector<int64_t> gs = sums.device_as<int64_t>();
    for (int64_t r = 0; r < c.n; ++r) {
        const int32_t want_bad = bad.hv().ptr<int32_t>()[r];
        ASSERT_EQ(gb[size_t(r)], want_bad) << c.name << " row " << r;
        if (want_bad >= 0) continue;
        for (int64_t i = 0; i < c.C; ++i) {
            ASSERT_EQ(gi[size_t(r * c.C + i)], ids.hv().ptr<int32_t>()[r * c.C + i])
                << c.name << " row " << r << " #" << i;
            ASSERT_EQ(gv[size_t(r * c.C + i)], values.hv().ptr<float>()[r * c.C + i])
                << c.name << " row " << r;
        }
        // The host adds V terms one after another: its own error is up to (V - 1) u of the sum (u = 2^-53),
        // 1.4e-11 at the V4 vocabulary; a row of ties (the same terms ~10,000 times) measured 1.3e-12 off the
        // exact sum on the host, and the block reduction's order is closer to exact, so 1e-12 was too tight.
        const double tol = double(c.V) * 0x1p-53;
        for (int k = 0; k < 3; ++k) {
            double got = 0, want = 0;
            std::memcpy(&got, &gs[size_t(3 * r + k)], 8);
            std::memcpy(&want, sums.hv().ptr<int64_t>() + 3 * r + k, 8);
            EXPECT_LE(std::fabs(got - want), tol * std::fabs(want)) << c.name << " row " << r << " sum " << k;
        }
    }
}

const TopCase kCases[] = {
    {"vocab_one_row_256", 1, 129280, 0, 256, false, false},
    {"vocab_64_rows_256_ties", 64, 129280, 0, 256, true, false},
    {"vocab_9_rows_1024_specials", 9, 129280, 0, 1024, false, true},
    {"vocab_3_rows_1", 3, 129280, 0, 1, true, false},
    {"small_strided_all", 4, 5, 3, 5, false, false},
    {"odd_width_ties_specials", 6, 1031, 1, 100, true, true},
};
INSTANTIATE_TEST_SUITE_P(Cases, CudaTopCandidates, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace di::gputest
