// Golden logits: deepinfer's forward (ref backend) against transformers 5.17.0 DeepseekV4ForCausalLM on the
// tiny fixtures of tests/data (tools/make_fixtures.py). fp32 fixtures: identical argmax at every position and
// max |d logit| <= 1e-3 * max |logit| (the bound; fp32 rounding differences measured ~1e-6).
#include <cmath>

#include <gtest/gtest.h>

#include "model_fixture.h"

namespace di::test {
namespace {

struct Agreement {
    float max_diff = 0, max_ref = 0;
    int64_t argmax_mismatch = 0;
};

Agreement compare(const std::vector<float>& got, const std::vector<float>& ref, int64_t rows, int64_t vocab) {
    Agreement a;
    a.max_ref = max_abs(ref);
    for (int64_t r = 0; r < rows; ++r) {
        int64_t bg = 0, br = 0;
        for (int64_t v = 0; v < vocab; ++v) {
            const size_t i = size_t(r * vocab + v);
            a.max_diff = std::max(a.max_diff, std::fabs(got[i] - ref[i]));
            if (got[i] > got[size_t(r * vocab + bg)]) bg = v;
            if (ref[i] > ref[size_t(r * vocab + br)]) br = v;
        }
        a.argmax_mismatch += bg != br;
    }
    return a;
}

class GoldenFp32 : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenFp32, FullForwardMatchesTransformers) {
    Fixture f = load_fixture(GetParam());
    ASSERT_TRUE(f.model);
    int64_t rows = 0, vocab = 0;
    const std::vector<float> ref = read_logits(f.dir + "/logits.npy", &rows, &vocab);
    ASSERT_EQ(rows, int64_t(f.prompt.size()));
    ASSERT_EQ(vocab, f.model->config().vocab_size);
    const std::vector<float> got = run_chunked(*f.model, f.prompt, {int64_t(f.prompt.size())});
    const Agreement a = compare(got, ref, rows, vocab);
    EXPECT_EQ(a.argmax_mismatch, 0);
    EXPECT_LE(a.max_diff, 1e-3f * a.max_ref) << "max |d| " << a.max_diff << " max |logit| " << a.max_ref;
    std::printf("%s: max |d logit| = %.3g, max |logit| = %.3g, relative %.3g\n", GetParam(), a.max_diff, a.max_ref,
                a.max_diff / a.max_ref);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenFp32, ::testing::Values("v4_tiny_fp32", "v4_tiny_fp32_nested"));

}  // namespace
}  // namespace di::test
