// indexer_topk on cpu vs ref: picks must be identical (ids and order, -1 past the causal cutoff), including
// exact ties (duplicate and zero keys: lower id first), near-ties below float resolution (the cpu kernel
// must rescore them as ref does), mixed-sign head weights, k > visible entries, and a V4-Flash decode shape.
#include <cstring>

#include "cpu_test_util.h"
#include "ops/op_cases.h"

namespace di::cputest {
namespace {

using ops::cases::IndexerCase;
using Keys = ops::cases::IndexerKeys;
// The cpu cases of the indexer table (ops/op_cases.h): picks identical to ref's (kIndexerPicks).
const std::vector<IndexerCase> kCases = ops::cases::indexer_cases(ops::cases::kCpuTest);

class CpuIndexer : public ::testing::TestWithParam<IndexerCase> {};

TEST_P(CpuIndexer, PicksIdenticalToRef) {
    const IndexerCase& c = GetParam();
    Tensor q(host_allocator(), DType::kF32, {c.L, c.H, c.dim}), w(host_allocator(), DType::kF32, {c.L, c.H});
    Tensor keys(host_allocator(), DType::kF32, {c.T, c.dim});
    fill_uniform(q);
    fill_uniform(w, c.w_lo, 1.0f);
    fill_uniform(keys);
    float* kp = keys.view().ptr<float>();
    if (c.keys == Keys::kTies) {  // every third key repeats an earlier one; every fifth is zero
        for (int64_t r = 0; r < c.T; ++r) {
            if (r % 3 == 2) std::memcpy(kp + r * c.dim, kp + (r / 2) * c.dim, size_t(c.dim) * 4);
            if (r % 5 == 4) std::memset(kp + r * c.dim, 0, size_t(c.dim) * 4);
        }
    } else if (c.keys == Keys::kNearTies) {  // keys 1 ulp apart in one channel: scores differ by ~1e-8
        for (int64_t r = 1; r < c.T; ++r) {
            std::memcpy(kp + r * c.dim, kp + (r % 7) * c.dim, size_t(c.dim) * 4);
            float& x = kp[r * c.dim + r % c.dim];
            x = std::nextafter(x, r % 2 ? 2.0f : -2.0f);
        }
    }
    Tensor p_ref(host_allocator(), DType::kI32, {c.L, c.k}), p_cpu(host_allocator(), DType::kI32, {c.L, c.k});
    std::memset(p_ref.view().data, 0x55, p_ref.view().nbytes());
    std::memset(p_cpu.view().data, 0x77, p_cpu.view().nbytes());
    auto args = [&](const Tensor& picks) {
        ops::IndexerTopkArgs a;
        a.q = q, a.weights = w, a.keys = keys, a.picks = picks;
        a.pos0 = c.pos0, a.rate = c.rate;
        a.weight_scale = 1.0f / std::sqrt(float(c.H));
        a.score_scale = 1.0f / std::sqrt(float(c.dim));
        return a;
    };
    backends().ref->indexer_topk(args(p_ref));
    backends().cpu->indexer_topk(args(p_cpu));
    for (int64_t t = 0; t < c.L; ++t)
        for (int64_t j = 0; j < c.k; ++j)
            ASSERT_EQ(p_cpu.view().ptr<int32_t>()[t * c.k + j], p_ref.view().ptr<int32_t>()[t * c.k + j])
                << c.name << ": query " << t << " pick " << j;
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuIndexer, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<IndexerCase>& i) {
                             return std::string(i.param.name);
                         });

}  // namespace
}  // namespace di::cputest
