// argmax on CUDA (one block per row) against the reference backend's host pick, exactly: ties (small
// integers), NaN and infinities at chosen places, the V4 vocabulary, strided rows, 1 to 64 rows.
#include <cmath>
#include <limits>

#include "gpu_test_util.h"

namespace di::gputest {
namespace {

struct ArgmaxCase {
    const char* name;
    int64_t n, V, pad;
    bool ties, specials;
};

class CudaArgmax : public ::testing::TestWithParam<ArgmaxCase> {};

TEST_P(CudaArgmax, MatchesRef) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const ArgmaxCase& c = GetParam();
    auto& b = backends();
    Pair x(DType::kF32, {c.n, c.V + c.pad}), ids(DType::kI32, {c.n}), bad(DType::kI32, {c.n});
    fill_uniform(x, -4, 4);
    float* h = x.hv().ptr<float>();
    const int64_t ld = c.V + c.pad;
    if (c.ties)
        for (int64_t i = 0; i < c.n * ld; ++i) h[i] = std::round(h[i]);
    if (c.specials)  // row r: a NaN, an inf or a -inf at places that differ per row; every third row clean
        for (int64_t r = 0; r < c.n; ++r) {
            const float sp[] = {std::nanf(""), std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity()};
            if (r % 3 != 2) h[r * ld + (r * 7919) % c.V] = sp[r % 3];
            if (r % 3 == 1) h[r * ld + c.V - 1] = sp[0];
        }
    x.upload();
    ids.poison(), bad.poison();
    auto args = [&](bool d) {
        TensorView xv = d ? x.dv() : x.hv();
        xv.shape[1] = c.V;  // the first V columns; row stride V + pad
        return ops::ArgmaxArgs{xv, d ? ids.dv() : ids.hv(), d ? bad.dv() : bad.hv()};
    };
    b.ref->argmax(args(false));
    b.gpu->argmax(args(true));
    const std::vector<int32_t> gi = ids.device_as<int32_t>(), gb = bad.device_as<int32_t>();
    for (int64_t r = 0; r < c.n; ++r) {
        EXPECT_EQ(gi[size_t(r)], ids.hv().ptr<int32_t>()[r]) << c.name << " row " << r;
        EXPECT_EQ(gb[size_t(r)], bad.hv().ptr<int32_t>()[r]) << c.name << " row " << r;
    }
}

const ArgmaxCase kCases[] = {
    {"vocab_one_row_ties", 1, 129280, 0, true, false},
    {"vocab_64_rows", 64, 129280, 0, false, false},
    {"vocab_16_rows_ties_specials", 16, 129280, 0, true, true},
    {"small_strided_specials", 7, 5, 3, false, true},
    {"odd_width_ties", 3, 1031, 1, true, false},
    {"unaligned_rows_ties_specials", 4, 1030, 1, true, true},  // rows 2 and 4 start off 16 bytes: no float4s
};
INSTANTIATE_TEST_SUITE_P(Cases, CudaArgmax, ::testing::ValuesIn(kCases),
                         [](const auto& tp) { return std::string(tp.param.name); });

}  // namespace
}  // namespace di::gputest
