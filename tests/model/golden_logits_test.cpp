// Golden logits: deepinfer's forward (ref backend) against transformers 5.17.0 DeepseekV4ForCausalLM on the
// tiny fixtures of tests/data (tools/make_fixtures.py). fp32 fixtures: identical argmax at every position and
// max |d logit| <= 1e-3 * max |logit| (the bound; fp32 rounding differences measured ~1e-6).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "logits_fidelity.h"
#include "long_prompt_golden.h"
#include "model_fixture.h"
#include "runtime/backend_factory.h"
#include "runtime/model_loader.h"

namespace di::test {
namespace {

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
    std::printf("%s: max |d logit| = %.3g, max |logit| = %.3g, relative %.3g\n", GetParam(), a.max_diff,
                a.max_ref, a.max_diff / a.max_ref);
}

// v4_tiny_fp8: official names, FP8 128x128 UE8M0 + FP4 experts, two shards; transformers dequantises the same
// bytes exactly and runs in fp32, so the fp32 bound applies.
INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenFp32,
                         ::testing::Values("v4_tiny_fp32", "v4_tiny_fp32_nested", "v4_tiny_fp8"));

// bf16 checkpoint. deepinfer computes in f32 on the bf16 weights, so it must match transformers' fp32 run of
// the same weights (logits_fp32.npy) to the fp32 bound. Against transformers' own bf16 run (logits.npy) it
// must stay within the reference's noise floor measured in meta.json: bf16 vs fp32 differ by up to 0.17 of
// max |logit| (discrete indexer/router choices flip in a few rows) and by ~0.010 in the median row.
TEST(GoldenBf16, MatchesFp32ReferenceAndStaysWithinBf16NoiseFloor) {
    Fixture f = load_fixture("v4_tiny_bf16");
    ASSERT_TRUE(f.model);
    int64_t rows = 0, vocab = 0;
    const std::vector<float> ref32 = read_logits(f.dir + "/logits_fp32.npy", &rows, &vocab);
    const std::vector<float> ref16 = read_logits(f.dir + "/logits.npy");
    const std::vector<float> got = run_chunked(*f.model, f.prompt, {int64_t(f.prompt.size())});
    const Agreement a32 = compare(got, ref32, rows, vocab);
    EXPECT_EQ(a32.argmax_mismatch, 0);
    EXPECT_LE(a32.max_diff, 1e-3f * a32.max_ref);
    const Agreement a16 = compare(got, ref16, rows, vocab);
    EXPECT_LE(a16.max_diff, 0.1705f * a16.max_ref);
    std::vector<float> row_rel;
    for (int64_t r = 0; r < rows; ++r) {
        float m = 0;
        for (int64_t v = 0; v < vocab; ++v)
            m = std::max(m, std::fabs(got[size_t(r * vocab + v)] - ref16[size_t(r * vocab + v)]));
        row_rel.push_back(m / a16.max_ref);
    }
    std::nth_element(row_rel.begin(), row_rel.begin() + long(row_rel.size() / 2), row_rel.end());
    const float median = row_rel[row_rel.size() / 2];
    EXPECT_LE(median, 2 * 0.0100f);
    std::printf(
        "bf16: vs fp32 reference relative %.3g; vs bf16 reference max relative %.3g, median row %.3g\n",
        a32.max_diff / a32.max_ref, a16.max_diff / a16.max_ref, median);
}

// Native precision (fp8 activation blocks into every FP8 linear and bf16 residual streams, as DeepSeek's
// inference code) on the FP8 fixture, against transformers' fp32 run of the same bytes (logits.npy). The
// reference's own noise floors on these weights (tools/fixtures_native.py): transformers with the same
// activation quantisation and bf16 streams simulated by hooks and forwards (logits_native.npy) against its
// fp32 run, and transformers bf16 against fp32 (logits_bf16.npy).
// Quantisation makes the forward chaotic (an input one ulp to either side of a rounding boundary moves by a
// whole e4m3 step, and routing and indexer choices follow), so deepinfer's native run is held to
// transformers' own native deviation from fp32, not to transformers' native logits themselves.
TEST(GoldenNative, Fp8FixtureWithinTransformersOwnFp8Deviation) {
    Fixture f = load_fixture("v4_tiny_fp8");
    ASSERT_TRUE(f.model);
    int64_t rows = 0, vocab = 0;
    const std::vector<float> ref = read_logits(f.dir + "/logits.npy", &rows, &vocab);
    const Fidelity hf_native = fidelity(read_logits(f.dir + "/logits_native.npy"), ref, rows, vocab);
    const Fidelity hf_bf16 = fidelity(read_logits(f.dir + "/logits_bf16.npy"), ref, rows, vocab);
    const std::vector<float> exact = run_chunked(*f.model, f.prompt, {int64_t(f.prompt.size())});
    f.model->set_precision(model::Precision::kNative);
    const std::vector<float> native = run_chunked(*f.model, f.prompt, {int64_t(f.prompt.size())});
    const Fidelity got = fidelity(native, ref, rows, vocab);
    const Fidelity to_hf_native = fidelity(native, read_logits(f.dir + "/logits_native.npy"), rows, vocab);
    auto line = [](const char* what, const Fidelity& x) {
        std::printf("%-44s top-1 %.4f, min cos %.5f, max rel %.3g, median rel %.3g\n", what, x.top1,
                    x.min_cos, x.max_rel, x.median_rel);
    };
    line("transformers bf16 vs fp32 (noise floor)", hf_bf16);
    line("transformers fp8 activations vs fp32", hf_native);
    line("deepinfer native vs transformers fp32", got);
    line("deepinfer native vs transformers fp8 act.", to_hf_native);
    EXPECT_NE(exact, native) << "native precision changed nothing";
    // The quantised forward is chaotic: two implementations of the same steps differ by about as much as
    // either differs from fp32 (both quantise the routed experts' inputs too since the experts' FP8 x FP4
    // GEMMs joined native precision; before that each metric was no worse than transformers', with this the
    // median came out 2% above). So deepinfer's deviation from fp32 is held to transformers' own fp8
    // deviation within 10% (median, max) and 3 of the 60 top-1 positions, and deepinfer's median distance to
    // transformers' native run must stay under 0.8 of that run's distance to fp32 (0.63 here, the streams in
    // bf16 on both sides; 0.61 with f32 streams on both; with the experts' quantisation left out of deepinfer
    // it was 0.94).
    EXPECT_GE(got.top1, hf_native.top1 - 3.0 / 60);
    EXPECT_LE(got.max_rel, 1.1 * hf_native.max_rel);
    EXPECT_LE(got.median_rel, 1.1 * hf_native.median_rel);
    EXPECT_LT(to_hf_native.median_rel, 0.8 * hf_native.median_rel);
}

// The long prompt (long_prompt_golden.h) on the cpu backend.
TEST(GoldenNative, LongPromptExactAndNative) {
    const std::string dir = std::string(DI_TEST_DATA) + "/v4_tiny_fp8";
    auto be = runtime::make_backend("cpu");
    ASSERT_TRUE(be.ok());
    auto m = runtime::load_model(dir, **be);
    ASSERT_TRUE(m.ok()) << m.error().message;
    expect_long_prompt_golden(**m, dir, "cpu");
}

}  // namespace
}  // namespace di::test
