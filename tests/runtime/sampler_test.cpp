// The sampler's greedy path (the logits themselves, no copy) and its masks, against the rule written out
// here: the first maximum among the ids neither suppressed nor masked; logprobs only when asked for, equal
// to a log-softmax computed in the test; and its draws (penalties, temperature, top-k, min-p, top-p, seed)
// against the same rules written out here the plain way: the whole vocabulary sorted.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// The sampling rules on a fully sorted vocabulary: the kept ids in rank order and their probabilities
// (not normalised: `total` is their sum).
struct Kept {
    std::vector<int32_t> ids;
    std::vector<double> prob;
    double total = 0;
};

Kept reference_kept(const std::vector<float>& logits, const SamplingParams& p,
                    const std::vector<int32_t>& context, const std::vector<int32_t>& generated,
                    const std::vector<int32_t>& suppressed) {
    const size_t V = logits.size();
    std::vector<double> z(logits.begin(), logits.end());
    std::vector<bool> seen(V, false);
    for (int32_t t : context) seen[size_t(t)] = true;
    for (size_t v = 0; v < V; ++v)
        if (seen[v] && p.repetition_penalty != 1.0f)
            z[v] = z[v] > 0 ? z[v] / p.repetition_penalty : z[v] * p.repetition_penalty;
    std::vector<int> count(V, 0);
    for (int32_t t : generated) ++count[size_t(t)];
    for (size_t v = 0; v < V; ++v)
        if (count[v] > 0) z[v] -= p.presence_penalty + p.frequency_penalty * count[v];
    for (int32_t t : suppressed) z[size_t(t)] = -INFINITY;
    std::vector<int32_t> order(V);
    for (size_t v = 0; v < V; ++v) order[v] = int32_t(v);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return z[size_t(a)] > z[size_t(b)] || (z[size_t(a)] == z[size_t(b)] && a < b);
    });
    size_t keep = p.top_k > 0 ? std::min(V, size_t(p.top_k)) : V;
    while (keep > 1 && std::isinf(z[size_t(order[keep - 1])])) --keep;
    std::vector<double> prob(keep);
    double sum = 0;
    const double m = z[size_t(order[0])] / p.temperature;
    for (size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(z[size_t(order[i])] / p.temperature - m);
    for (double& q : prob) q /= sum;
    size_t k = 1;
    while (p.min_p > 0 && k < keep && prob[k] >= p.min_p * prob[0]) ++k;
    if (p.min_p > 0) keep = k;
    double mass = 0;
    for (k = 0; p.top_p < 1.0f && k < keep && (k == 0 || mass < p.top_p);) mass += prob[k++];
    if (p.top_p < 1.0f) keep = k;
    Kept out{std::vector<int32_t>(order.begin(), order.begin() + long(keep)),
             std::vector<double>(prob.begin(), prob.begin() + long(keep)), 0};
    for (double q : out.prob) out.total += q;
    return out;
}

// The draw by those rules with the sampler's uniform draw (the top 53 bits of mt19937_64(seed)'s numbers).
int32_t reference_draw(const std::vector<float>& logits, const SamplingParams& p,
                       const std::vector<int32_t>& context, const std::vector<int32_t>& generated,
                       const std::vector<int32_t>& suppressed) {
    const Kept k = reference_kept(logits, p, context, generated, suppressed);
    std::mt19937_64 rng(p.seed);
    double r = double(rng() >> 11) * 0x1.0p-53 * k.total;
    for (size_t i = 0; i < k.ids.size(); ++i) {
        if (r < k.prob[i]) return k.ids[i];
        r -= k.prob[i];
    }
    return k.ids.back();
}

TEST(Sampler, DrawsFollowTheRulesOnASortedVocabulary) {
    struct Case {
        float temperature;
        int top_k;
        float top_p, min_p, repetition, presence, frequency;
    };
    const Case cases[] = {
        {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},    {0.7f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f},
        {1.3f, 40, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},   {0.9f, 50, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f},
        {1.0f, 0, 1.0f, 0.1f, 1.0f, 0.0f, 0.0f},    {0.6f, 0, 0.8f, 0.0f, 1.3f, 0.5f, 0.25f},
        {2.0f, 0, 0.999f, 0.0f, 1.0f, -1.0f, 0.0f}, {1.0f, 3000, 1.0f, 0.0f, 1.1f, 0.0f, 0.2f}};
    int differing_picks = 0, n = 0;
    for (const Case& c : cases) {
        for (uint64_t seed = 0; seed < 60; ++seed) {
            std::vector<float> l = random_logits(3000 + seed, seed);
            if (seed % 5 == 0) l[11] = l[12] = 9.0f;  // ties at the top: the lower id first
            SamplingParams p;
            p.temperature = c.temperature, p.top_k = c.top_k, p.top_p = c.top_p, p.min_p = c.min_p;
            p.repetition_penalty = c.repetition, p.presence_penalty = c.presence;
            p.frequency_penalty = c.frequency, p.seed = seed * 7919 + 1;
            std::mt19937_64 rng(seed);
            std::vector<int32_t> context, generated, suppressed;
            for (int i = 0; i < 40; ++i) context.push_back(int32_t(rng() % l.size()));
            generated.assign(context.begin() + 25, context.end());
            if (seed % 3 == 0) suppressed = {int32_t(rng() % l.size()), 11};
            const int32_t got = Sampler(p).sample(l, context, generated, suppressed).id;
            const int32_t want = reference_draw(l, p, context, generated, suppressed);
            ++n;
            // The sampler sums the normalisation in id order where no top-k cuts, the rule here in rank
            // order: a pick may differ only where the draw falls within a rounding error of a boundary.
            if (got != want) ++differing_picks;
            EXPECT_TRUE(std::find(suppressed.begin(), suppressed.end(), got) == suppressed.end());
        }
    }
    EXPECT_EQ(differing_picks, 0) << "of " << n;
}

TEST(Sampler, EveryIdBarredGivesIdZero) {
    SamplingParams p;
    p.temperature = 0.8f;
    const std::vector<float> l = random_logits(64, 1);
    std::vector<int32_t> all(64);
    for (int i = 0; i < 64; ++i) all[size_t(i)] = i;
    EXPECT_EQ(Sampler(p).sample(l, {}, {}, all).id, 0);
}

// Speculative sampling (Sampler::sample_draft): the draft is kept where the first uniform falls below its
// probability, else the second draws from the other kept ids, exactly as written out here; and over many
// draws every id comes out with its probability under the plain rules (a chi-square bound), whichever id the
// draft is: the best, one further down, one top-k cuts.
TEST(Sampler, DraftsKeepTheDistribution) {
    SamplingParams p;
    p.temperature = 0.8f, p.top_k = 6, p.top_p = 0.97f, p.min_p = 0.01f, p.repetition_penalty = 1.2f;
    p.presence_penalty = 0.3f;
    std::vector<float> l = random_logits(40, 9);
    for (size_t v = 0; v < 8; ++v) l[v] = 2.0f - 0.3f * float(v);  // a spread-out top eight
    const std::vector<int32_t> context = {1, 5, 30}, generated = {5};
    const Kept k = reference_kept(l, p, context, generated, {});
    ASSERT_GE(k.ids.size(), 4u);
    for (const int32_t draft : {k.ids[0], k.ids[2], int32_t(39)}) {
        SCOPED_TRACE(draft);
        const auto at = std::find(k.ids.begin(), k.ids.end(), draft);
        const double q_draft = at == k.ids.end() ? 0.0 : k.prob[size_t(at - k.ids.begin())];
        for (uint64_t seed = 0; seed < 200; ++seed) {  // the rule, draw by draw
            p.seed = seed;
            bool kept = true;
            const int32_t got = Sampler(p).sample_draft(l, draft, kept, context, generated).id;
            std::mt19937_64 rng(seed);
            const double u1 = double(rng() >> 11) * 0x1.0p-53, u2 = double(rng() >> 11) * 0x1.0p-53;
            int32_t want = draft;
            if (!(u1 * k.total < q_draft)) {
                double r = u2 * (k.total - q_draft);
                for (size_t i = 0; i < k.ids.size(); ++i) {
                    if (k.ids[i] == draft) continue;
                    want = k.ids[i];
                    if (r < k.prob[i]) break;
                    r -= k.prob[i];
                }
            }
            ASSERT_EQ(got, want) << "seed " << seed;
            EXPECT_EQ(kept, got == draft);
        }
        p.seed = 12345;  // the distribution: one sampler, many draws
        Sampler s(p);
        const int n = 200000;
        std::vector<int> seen(l.size(), 0);
        for (int i = 0; i < n; ++i) {
            bool kept = false;
            ++seen[size_t(s.sample_draft(l, draft, kept, context, generated).id)];
        }
        double chi2 = 0;
        int outside = 0;
        for (size_t v = 0; v < l.size(); ++v) {
            const auto it = std::find(k.ids.begin(), k.ids.end(), int32_t(v));
            if (it == k.ids.end()) {
                outside += seen[v];
                continue;
            }
            const double e = n * k.prob[size_t(it - k.ids.begin())] / k.total;
            chi2 += (seen[v] - e) * (seen[v] - e) / e;
        }
        EXPECT_EQ(outside, 0);
        EXPECT_LT(chi2, 30.0) << "over " << k.ids.size() << " ids";  // P(chi2 > 30 | <= 7 dof) < 1e-4
    }
}

}  // namespace
}  // namespace di::runtime
