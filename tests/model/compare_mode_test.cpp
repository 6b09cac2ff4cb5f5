// Compare mode names the first divergent op: a backend with a planted bug in one op (and only from one
// layer on) is run under CompareBackend over a whole forward.
#include <gtest/gtest.h>

#include "model_fixture.h"
#include "ops/compare/compare_backend.h"
#include "ops/ref/ref_backend.h"
#include "ref_forwarding_backend.h"
#include "runtime/model_loader.h"

namespace di::test {
namespace {

// Forwards every op to the reference, but scales the compressor's output by 1.01 from layer 3 on.
class PlantedBug final : public RefForwarding {
  public:
    std::string_view name() const override { return "planted"; }
    void set_scope(std::string_view s) override { scope_ = s; }
    void compress(const ops::CompressArgs& a) override {
        ref().compress(a);
        if (scope_.rfind("layer 3 /", 0) == 0)
            for (int64_t i = 0; i < a.out.numel(); ++i) a.out.ptr<float>()[i] *= 1.01f;
    }

  private:
    std::string scope_;
};

TEST(CompareMode, NamesTheFirstDivergentOp) {
    PlantedBug bug;
    ops::CompareBackend cmp(bug, 1e-4);
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp32", cmp);
    ASSERT_TRUE(m.ok());
    Fixture f = load_fixture("v4_tiny_fp32");
    run_chunked(**m, f.prompt, {int64_t(f.prompt.size())});
    ASSERT_TRUE(cmp.first_divergence().has_value());
    const ops::Divergence& d = *cmp.first_divergence();
    EXPECT_EQ(d.scope, "layer 3 / compressor");
    EXPECT_EQ(d.op, "compress");
    EXPECT_EQ(d.field, "compress.out");
    EXPECT_GT(cmp.ops_compared(), 100);
}

TEST(CompareMode, ReferenceAgainstItselfAgrees) {
    auto ref = ops::make_ref_backend();
    ops::CompareBackend cmp(*ref, 1e-6);
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp32", cmp);
    ASSERT_TRUE(m.ok());
    Fixture f = load_fixture("v4_tiny_fp32");
    run_chunked(**m, std::vector<int32_t>(f.prompt.begin(), f.prompt.begin() + 20), {7});
    EXPECT_FALSE(cmp.first_divergence().has_value()) << cmp.first_divergence()->describe();
    EXPECT_EQ(cmp.worst_relative(), 0.0);
}

}  // namespace
}  // namespace di::test
