// Drawing from a row's sampling candidates (ops::top_candidates on the host, the reference) gives the token,
// logprob and alternatives that drawing from the whole row gives, bit for bit, over temperatures, top-k,
// top-p, min-p, logprobs and seeds; where the draw reads past the candidates it says so and leaves the
// sampler as it was (the next full-row draw is the one a fresh sampler makes).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/sampling.h"
#include "runtime/sampler.h"

namespace di::runtime {
namespace {

struct Row {
    std::vector<float> logits;
    std::vector<int32_t> ids;
    std::vector<float> values;
    double sums[3] = {};
};

// Logits like a language model's: a few likely ids over a normal tail; `flat` makes every id about as likely.
Row make_row(int64_t V, int64_t C, float T, bool flat, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> tail(0.0f, flat ? 0.05f : 2.0f);
    Row r;
    r.logits.resize(size_t(V));
    for (float& x : r.logits) x = tail(rng);
    if (!flat)
        for (int i = 0; i < 20; ++i) r.logits[rng() % size_t(V)] = 8.0f + float(i % 5);
    r.logits[size_t(V / 2)] = r.logits[size_t(V / 3)];  // a tie
    r.ids.resize(size_t(C)), r.values.resize(size_t(C));
    int32_t bad = 0;
    ops::top_candidates_row(r.logits.data(), V, T, r.ids.data(), r.values.data(), C, r.sums, &bad);
    EXPECT_EQ(bad, -1);
    return r;
}

TEST(SamplerCandidates, SameDrawAsTheFullRow) {
    int64_t drawn = 0, fell_back = 0;
    uint32_t seed = 1;
    for (const int64_t V : {int64_t(300), int64_t(129280)})
        for (const int64_t C : {int64_t(16), int64_t(256)})
            for (const bool flat : {false, true})
                for (const float T : {0.0f, 0.3f, 1.0f, 1.7f})
                    for (const int top_k : {0, 1, 10, 200})
                        for (const float top_p : {1.0f, 0.9f, 0.3f})
                            for (const float min_p : {0.0f, 0.05f}) {
                                SamplingParams p;
                                p.temperature = T, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p;
                                p.seed = seed++, p.logprobs = seed % 2 == 0,
                                p.top_logprobs = int(seed % 3) * 5;
                                const Row r = make_row(V, C, T, flat, seed);
                                Sampler full(p), cand(p);
                                const Candidates c{r.ids, r.values, r.sums[0], r.sums[1], r.sums[2], V};
                                for (int step = 0; step < 3; ++step) {  // the RNG's state carries on
                                    const SampledToken want = full.sample(r.logits, {}, {});
                                    std::optional<SampledToken> got = cand.sample(c);  // nothing adjusted
                                    if (!got) {
                                        ++fell_back;
                                        got = cand.sample(r.logits, {}, {});
                                    }
                                    ++drawn;
                                    ASSERT_EQ(got->id, want.id)
                                        << "V " << V << " C " << C << " T " << T << " top_k " << top_k
                                        << " top_p " << top_p << " min_p " << min_p << " flat " << flat;
                                    EXPECT_EQ(got->logprob, want.logprob);
                                    EXPECT_EQ(got->top, want.top);
                                }
                            }
    // both paths were taken: the candidates answer most draws, the flat rows' wide top-p / no-cut draws not
    std::printf("%lld draws, %lld from the full row\n", (long long)drawn, (long long)fell_back);
    EXPECT_GT(fell_back, 0);
    EXPECT_GT(drawn - fell_back, drawn / 2);
}

// With penalties and suppressed ids the candidates are completed by the adjusted ids' logits: the same
// tokens as the full row (its sum is then formed another way: equal but for rounding, which moves a draw
// only where its uniform number falls within ~1e-16 of a boundary) and the same logprobs.
TEST(SamplerCandidates, PenaltiesAndSuppressedIdsFromTheAdjustedLogits) {
    int64_t drawn = 0, fell_back = 0;
    uint32_t seed = 77;
    const int64_t V = 129280;
    for (const int64_t C : {int64_t(16), int64_t(256)})
        for (const float T : {0.0f, 0.5f, 1.0f})
            for (const float rep : {1.0f, 1.3f, 0.8f})
                for (const float presence : {0.0f, 0.7f, -0.5f})
                    for (const float frequency : {0.0f, 0.4f})
                        for (const int top_k : {0, 40}) {
                            SamplingParams p;
                            p.temperature = T, p.top_k = top_k, p.top_p = seed % 3 == 0 ? 0.9f : 1.0f;
                            p.repetition_penalty = rep, p.presence_penalty = presence;
                            p.frequency_penalty = frequency, p.seed = seed++, p.logprobs = true;
                            const Row r = make_row(V, C, T, false, seed);
                            // the context repeats some of the likely ids (and a few others); two are held
                            // back
                            std::mt19937 rng(seed);
                            std::vector<int32_t> context, suppressed = {r.ids[1], int32_t(rng() % V)};
                            for (int i = 0; i < 40; ++i)
                                context.push_back(i % 3 == 0 ? r.ids[size_t(rng() % 8)] : int32_t(rng() % V));
                            const std::span<const int32_t> generated = std::span(context).subspan(25);
                            Sampler full(p), cand(p);
                            const std::vector<int32_t> adj =
                                cand.adjusted_ids(context, generated, suppressed);
                            std::vector<float> raw;
                            for (const int32_t id : adj) raw.push_back(r.logits[size_t(id)]);
                            const Candidates c{r.ids, r.values, r.sums[0], r.sums[1], r.sums[2], V};
                            for (int step = 0; step < 2; ++step) {
                                const SampledToken want =
                                    full.sample(r.logits, context, generated, suppressed);
                                std::optional<SampledToken> got =
                                    cand.sample(c, context, generated, suppressed, adj, raw);
                                if (!got) {
                                    ++fell_back;
                                    got = cand.sample(r.logits, context, generated, suppressed);
                                }
                                ++drawn;
                                ASSERT_EQ(got->id, want.id)
                                    << "C " << C << " T " << T << " rep " << rep << " presence " << presence
                                    << " frequency " << frequency << " top_k " << top_k;
                                EXPECT_EQ(got->logprob, want.logprob);
                            }
                        }
    std::printf("%lld draws with penalties, %lld from the full row\n", (long long)drawn,
                (long long)fell_back);
    EXPECT_GT(drawn - fell_back, drawn / 2);
}

TEST(SamplerCandidates, ANonFiniteLogitIsReported) {
    std::vector<float> x = {1.0f, NAN, 3.0f, INFINITY};
    int32_t ids[2], bad = 0;
    float values[2];
    double sums[3];
    ops::top_candidates_row(x.data(), 4, 1.0f, ids, values, 2, sums, &bad);
    EXPECT_EQ(bad, 1);
}

}  // namespace
}  // namespace di::runtime
