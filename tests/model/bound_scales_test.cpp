// A backend may keep FP8 weights' block scales in a form of its own (Backend::fp8_block_scales, made once at
// binding: the cuda backend's f32 rows padded to cuBLASLt's stride). Here a reference backend binds them as
// f32 rows with three padding columns of NaN, decoded from the e8m0 bytes by this test's own arithmetic: the
// logits must equal the plain reference's bit for bit (a power of two is the same f32 either way), no op may
// read the padding, and compare mode copies such views to the host intact.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "model_fixture.h"
#include "ops/compare/compare_backend.h"
#include "ref_forwarding_backend.h"
#include "runtime/model_loader.h"

namespace di::test {
namespace {

class PaddedScales final : public RefForwarding {
  public:
    std::string_view name() const override { return "padded-scales"; }
    std::optional<BoundScales> fp8_block_scales(const TensorView& s) override {
        ++calls;
        const int64_t rows = s.shape[0], cols = s.shape[1], ld = cols + 3;
        BoundScales b{Tensor(allocator(), DType::kF32, {rows * ld}), {}};
        float* p = b.storage.view().ptr<float>();
        for (int64_t i = 0; i < rows * ld; ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
                p[r * ld + c] = s.dtype == DType::kE8M0
                                    ? std::ldexp(1.0f, int(s.ptr<uint8_t>()[r * s.stride[0] + c]) - 127)
                                    : s.ptr<float>()[r * s.stride[0] + c];
        b.view = s;
        b.view.data = p;
        b.view.dtype = DType::kF32;
        b.view.stride[0] = ld;
        return b;
    }
    int calls = 0;
};

std::vector<int32_t> prompt_of(const Fixture& f) {
    return std::vector<int32_t>(f.prompt.begin(), f.prompt.begin() + 24);
}

TEST(BoundScales, LogitsEqualTheCheckpointsScalesBitForBit) {
    Fixture f = load_fixture("v4_tiny_fp8");
    const std::vector<float> want = run_chunked(*f.model, prompt_of(f), {9});
    PaddedScales be;
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp8", be);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_GT(be.calls, 10);  // every fp8 linear of the fixture
    const std::vector<float> got = run_chunked(**m, prompt_of(f), {9});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
}

TEST(BoundScales, CompareModeAgreesExactly) {
    PaddedScales be;
    ops::CompareBackend cmp(be, 1e-6);
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp8", cmp);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_GT(be.calls, 10);  // compare mode asks its subject
    Fixture f = load_fixture("v4_tiny_fp8");
    run_chunked(**m, prompt_of(f), {7});
    EXPECT_FALSE(cmp.first_divergence().has_value()) << cmp.first_divergence()->describe();
    EXPECT_EQ(cmp.worst_relative(), 0.0);
}

}  // namespace
}  // namespace di::test
