// argmax (ops/elementwise.h): the first maximum of each row, the first non-finite index, on ref and cpu,
// against rows whose answers are written out by hand and random rows against std::max_element.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "cpu_test_util.h"
#include "ops/elementwise.h"

namespace di::cputest {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Argmax, FirstMaximumAndFirstNonFinite) {
    const float nan = std::nanf("");
    const std::vector<std::vector<float>> rows = {
        {1, 3, 2, 3},           // tie: the first
        {nan, -5, -7, -5},      // NaN first: skipped, reported
        {0, kInf, 9, -kInf},    // inf is not a maximum
        {-1, -1, -1, -1},       // all equal
        {nan, nan, kInf, nan},  // nothing finite: id 0
    };
    const int32_t want_id[] = {1, 1, 2, 0, 0}, want_bad[] = {-1, 0, 1, -1, 0};
    const int64_t n = int64_t(rows.size()), V = 4;
    Tensor x(host_allocator(), DType::kF32, {n, V}), ids(host_allocator(), DType::kI32, {n}),
        bad(host_allocator(), DType::kI32, {n});
    for (int64_t r = 0; r < n; ++r)
        std::copy(rows[size_t(r)].begin(), rows[size_t(r)].end(), x.view().ptr<float>() + r * V);
    for (ops::Backend* be : {static_cast<ops::Backend*>(backends().ref.get()),
                             static_cast<ops::Backend*>(backends().cpu.get())}) {
        std::fill_n(ids.view().ptr<int32_t>(), n, 77), std::fill_n(bad.view().ptr<int32_t>(), n, 77);
        be->argmax({x.view(), ids.view(), bad.view()});
        for (int64_t r = 0; r < n; ++r) {
            EXPECT_EQ(bad.view().ptr<int32_t>()[r], want_bad[r]) << be->name() << " row " << r;
            EXPECT_EQ(ids.view().ptr<int32_t>()[r], want_id[r]) << be->name() << " row " << r;
        }
    }
}

TEST(Argmax, RandomRowsMatchMaxElement) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> small(-3, 3);  // many ties
    const int64_t n = 5, V = 129280;
    Tensor x(host_allocator(), DType::kF32, {n, V}), ids(host_allocator(), DType::kI32, {n}),
        bad(host_allocator(), DType::kI32, {n});
    for (int64_t i = 0; i < n * V; ++i) x.view().ptr<float>()[i] = float(small(rng));
    backends().cpu->argmax({x.view(), ids.view(), bad.view()});
    for (int64_t r = 0; r < n; ++r) {
        const float* row = x.view().ptr<float>() + r * V;
        EXPECT_EQ(ids.view().ptr<int32_t>()[r], int32_t(std::max_element(row, row + V) - row)) << r;
        EXPECT_EQ(bad.view().ptr<int32_t>()[r], -1) << r;
    }
}

}  // namespace
}  // namespace di::cputest
