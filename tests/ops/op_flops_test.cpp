// The profile's flop counts (ops/compare/op_flops.h) on small cases counted by hand from the ops' visibility
// rules (attention.h, indexer.h), and their column in the profile's table.
#include "ops/compare/op_flops.h"

#include <gtest/gtest.h>

#include <vector>

#include "ops/compare/profile_backend.h"

using namespace di;
using namespace di::ops;

namespace {

Tensor host(DType t, std::initializer_list<int64_t> shape) { return Tensor::zeros_host(t, shape); }

}  // namespace

TEST(OpFlops, LinearIsTwoNOutIn) {
    const Tensor x = host(DType::kF32, {3, 7}), y = host(DType::kF32, {3, 5});
    LinearArgs a;
    a.x = x, a.y = y, a.w.out_dim = 5, a.w.in_dim = 7;
    EXPECT_EQ(linear_flops(a), 2.0 * 3 * 5 * 7);
}

// Three queries at positions 5, 6, 7 (pos0 5), 2 heads of 4: 4 x 2 x 4 = 32 flops a visible key.
TEST(OpFlops, AttentionCountsEachQuerysVisibleKeys) {
    const Tensor q = host(DType::kF32, {3, 2, 4}), comp = host(DType::kF32, {10, 4}),
                 picks = host(DType::kI32, {3, 3});
    AttentionArgs a;
    a.q = q, a.pos0 = 5, a.n_cached = 4, a.window = 4;
    // window 4, the ring holding 1..4: keys 2..5, 3..6 and 4..7
    EXPECT_EQ(attention_flops(a, {}), 32.0 * 12);
    // the ring holding 4 only: 4..5, 4..6 and 4..7
    a.n_cached = 1;
    EXPECT_EQ(attention_flops(a, {}), 32.0 * (2 + 3 + 4));
    a.n_cached = 4;
    // HCA at rate 2 over 10 entries: entries w < (p + 1) / 2 = 3, 3 and 4
    a.comp = comp, a.comp_mask = CompMask::kCausal, a.rate = 2;
    EXPECT_EQ(attention_flops(a, {}), 32.0 * (12 + 3 + 3 + 4));
    // CSA picks: {0, 2, -1}, {1, 1, 5} (5 once), {-1, -1, -1}
    a.comp_mask = CompMask::kPicks, a.picks = picks;
    const std::vector<int32_t> p = {0, 2, -1, 1, 1, 5, -1, -1, -1};
    EXPECT_EQ(attention_flops(a, p), 32.0 * (12 + 2 + 2 + 0));
}

// Pairs of experts in range only; the experts pass only its own experts; the combine pass none. D = 8, I = 5:
// up 2 x 2 x 5 x 8 = 160, down 2 x 8 x 5 = 80 a pair.
TEST(OpFlops, MoeCountsTheTakenPairs) {
    const Tensor x = host(DType::kF32, {2, 8}), w1 = host(DType::kF32, {5, 8});
    std::vector<ExpertWeights> experts(4);
    for (ExpertWeights& e : experts) e.w1.data = w1, e.w1.out_dim = 5, e.w1.in_dim = 8;
    MoeArgs a;
    a.x = x, a.experts = experts.data(), a.n_experts = 4;
    const std::vector<int32_t> ids = {0, 3, -1, 2, 2, 7};
    EXPECT_EQ(moe_flops(a, ids), 4 * 240.0);
    a.pass = MoeArgs::Pass::kExperts, a.expert_first = 2, a.expert_end = 4;
    EXPECT_EQ(moe_flops(a, ids), 3 * 240.0);
    a.pass = MoeArgs::Pass::kCombine;
    EXPECT_EQ(moe_flops(a, ids), 0.0);
}

// Queries at 6 and 7, rate 4: entries closed w < 7 / 4 = 1 and 8 / 4 = 2; 3 heads of 4.
TEST(OpFlops, IndexerCountsTheClosedEntries) {
    const Tensor q = host(DType::kF32, {2, 3, 4}), keys = host(DType::kF32, {5, 4});
    IndexerTopkArgs a;
    a.q = q, a.keys = keys, a.pos0 = 6, a.rate = 4;
    EXPECT_EQ(indexer_flops(a), 2.0 * 3 * 4 * (1 + 2));
}

TEST(OpFlops, MhcMixingRows) {
    const Tensor streams = host(DType::kF32, {2, 4, 8}), fn = host(DType::kF32, {24, 32}),
                 head_fn = host(DType::kF32, {4, 32});
    MhcPreArgs pre;
    pre.streams = streams, pre.fn = fn;
    HcHeadArgs head;
    head.streams = streams, head.fn = head_fn;
    EXPECT_EQ(mhc_pre_flops(pre), 2.0 * 2 * 24 * 32);
    EXPECT_EQ(hc_head_flops(head), 2.0 * 2 * 4 * 32);
}

TEST(OpFlops, ProfileTableGivesTflopsWhereAnOpHasFlops) {
    const std::vector<OpProfile> t = {{"linear", 2, 0.5, 1e9, 3e12}, {"rms_norm", 4, 0.5, 2e9, 0}};
    const std::string md = ProfileBackend::markdown_of(t);
    EXPECT_NE(md.find("| GFLOP | TFLOP/s |"), std::string::npos) << md;
    EXPECT_NE(md.find("| linear | 2 | 500.000 | 50.0% | 1000.0 | 2 | 3000.0 | 6.00 |"), std::string::npos)
        << md;
    EXPECT_NE(md.find("| rms_norm | 4 | 500.000 | 50.0% | 2000.0 | 4 | | |"), std::string::npos) << md;
    EXPECT_NE(md.find("| total | | 1000.000 | 100% | | | 3000.0 | 3.00 |"), std::string::npos) << md;
}
