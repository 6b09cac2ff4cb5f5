// The sampler's greedy path (the logits themselves, no copy) and its masks, against the rule written out
// here: the first maximum among the ids neither suppressed nor masked; logprobs only when asked for, equal
// to a log-softmax computed in the test.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace di::runtime {
namespace {

std::vector<float> random_logits(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0, 3);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

int32_t first_max(const std::vector<float>& l, const std::vector<bool>& ok) {
    int32_t best = -1;
    for (size_t v = 0; v < l.size(); ++v)
        if (ok[v] && (best < 0 || l[v] > l[size_t(best)])) best = int32_t(v);
    return best;
}

TEST(Sampler, GreedyIsTheFirstMaximumAmongAllowedIds) {
    SamplingParams p;
    p.temperature = 0;
    for (uint64_t seed = 0; seed < 20; ++seed) {
        std::vector<float> l = random_logits(1000 + seed, seed);
        l[7] = l[500] = 100;  // a tie: the lower id wins
        std::vector<bool> ok(l.size(), true);
        Sampler s(p);
        EXPECT_EQ(s.sample(l, {}, {}).id, 7);
        const std::vector<int32_t> suppressed = {7, 3};
        ok[7] = ok[3] = false;
        EXPECT_EQ(s.sample(l, {}, {}, suppressed).id, 500);
        std::vector<uint32_t> mask((l.size() + 31) / 32, 0);
        std::mt19937_64 rng(seed);
        for (size_t v = 0; v < l.size(); ++v) {
            const bool allow = rng() % 3 == 0;
            if (allow) mask[v / 32] |= 1u << (v % 32);
            ok[v] = ok[v] && allow;
        }
        EXPECT_EQ(s.sample(l, {}, {}, suppressed, mask).id, first_max(l, ok)) << "seed " << seed;
    }
}

TEST(Sampler, LogprobsOnlyWhenAskedAndExact) {
    const std::vector<float> l = random_logits(4096, 3);
    double m = -1e30, sum = 0;
    for (float x : l) m = std::max(m, double(x));
    for (float x : l) sum += std::exp(double(x) - m);
    const double lse = m + std::log(sum);
    for (float temperature : {0.0f, 0.8f}) {
        SamplingParams p;
        p.temperature = temperature;
        p.seed = 5;
        const SampledToken silent = Sampler(p).sample(l, {}, {});
        EXPECT_EQ(silent.logprob, 0.0f);
        EXPECT_TRUE(silent.top.empty());
        p.logprobs = true;
        p.top_logprobs = 3;
        const SampledToken t = Sampler(p).sample(l, {}, {});
        EXPECT_EQ(t.id, silent.id);  // asking for logprobs does not change the pick
        EXPECT_NEAR(t.logprob, double(l[size_t(t.id)]) - lse, 1e-5);
        ASSERT_EQ(t.top.size(), 3u);
        EXPECT_NEAR(t.top[0].second, double(*std::max_element(l.begin(), l.end())) - lse, 1e-5);
    }
}

}  // namespace
}  // namespace di::runtime
