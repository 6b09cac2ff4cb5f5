// Chunked prefill and decode through the per-sequence state equal one full forward (fp32 fixtures):
// every chunking gives logits within 1e-4 * max |logit| of the one-shot forward at every position.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_fixture.h"

namespace di::test {
namespace {

TEST(ChunkedDecode, EveryChunkingMatchesOneShot) {
    Fixture f = load_fixture("v4_tiny_fp32");
    ASSERT_TRUE(f.model);
    const auto& p = f.prompt;
    const std::vector<float> full = run_chunked(*f.model, p, {int64_t(p.size())});
    const float tol = 1e-4f * max_abs(full);
    std::mt19937 rng(1234);
    std::vector<std::vector<int64_t>> schedules = {{1}, {3}, {4}, {16}, {5, 11, 2}, {20, 1}};
    for (int r = 0; r < 3; ++r) {  // random chunkings
        std::vector<int64_t> s;
        for (int i = 0; i < 8; ++i) s.push_back(1 + int64_t(rng() % 17));
        schedules.push_back(s);
    }
    for (const auto& sched : schedules) {
        const std::vector<float> got = run_chunked(*f.model, p, sched);
        ASSERT_EQ(got.size(), full.size());
        float worst = 0;
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - full[i]));
        EXPECT_LE(worst, tol) << "schedule starting " << sched[0] << " of " << sched.size();
    }
}

}  // namespace
}  // namespace di::test
