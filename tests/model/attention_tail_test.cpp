// A backend whose attention kernels take the layer's tail (Backend::fuses_attention_tail: the cuda backend's
// attention_wgp on V4-Flash's prefill shapes) gets the queries' norm and rotation in attentions_stored's
// QueryPrep instead of beside kv's, and, in the native precision, the output to quantise there for wo_a's
// groups, which then read the codes (LinearArgs' pre-quantised x). Here a reference backend claims so and
// runs the default tail (prepare, attend, store, rotate, quantise): the logits must equal the plain
// reference's bit for bit in both precisions, so the model hands over exactly the norm, rotation and
// quantisation it ran before, on every chunk and layer kind; with bf16 queries, the tail and the parts agree.
#include <gtest/gtest.h>

#include "model_fixture.h"
#include "ref_forwarding_backend.h"
#include "runtime/model_loader.h"

namespace di::test {
namespace {

class TailInKernels final : public RefForwarding {
  public:
    explicit TailInKernels(bool tail = true, bool bf16q = false) : tail_(tail), bf16q_(bf16q) {}
    std::string_view name() const override { return "tail-in-kernels"; }
    bool fuses_attention_tail(std::span<const int64_t>, int64_t, int64_t, bool) const override {
        return tail_;
    }
    bool bf16_queries() const override { return bf16q_; }
    void attentions_stored(std::span<const ops::AttentionArgs> jobs,
                           std::span<const ops::WindowStoreArgs> stores, const ops::RopeArgs& out_rope,
                           const ops::QueryPrep* q_prep, const ops::ActQuantArgs* out_quant) override {
        prepared += q_prep != nullptr, quantised += out_quant != nullptr;
        Backend::attentions_stored(jobs, stores, out_rope, q_prep, out_quant);
    }
    void linear(const ops::LinearArgs& a) override {
        prequantised += a.x.dtype == DType::kF8E4M3, bf16_out += a.y.dtype == DType::kBF16;
        RefForwarding::linear(a);
    }
    int prepared = 0, quantised = 0, prequantised = 0, bf16_out = 0;

  private:
    bool tail_, bf16q_;
};

void expect_same_logits(model::Precision precision) {
    Fixture f = load_fixture("v4_tiny_fp8");
    f.model->set_precision(precision);
    const std::vector<int32_t> prompt(f.prompt.begin(), f.prompt.begin() + 24);
    const std::vector<float> want = run_chunked(*f.model, prompt, {9});
    TailInKernels be;
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp8", be);
    ASSERT_TRUE(m.ok()) << m.error().message;
    (*m)->set_precision(precision);
    const std::vector<float> got = run_chunked(**m, prompt, {9});
    EXPECT_GT(be.prepared, 0) << "the model never handed q's preparation to the tail";
    const bool native = precision == model::Precision::kNative;
    EXPECT_EQ(be.quantised > 0, native) << "the output is quantised in the tail for native precision only";
    EXPECT_EQ(be.prequantised > 0, native) << "wo_a reads the tail's codes in native precision only";
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
}

TEST(AttentionTail, ExactLogitsUnchanged) { expect_same_logits(model::Precision::kExact); }
TEST(AttentionTail, NativeLogitsUnchanged) { expect_same_logits(model::Precision::kNative); }

// Native queries in bf16 (Backend::bf16_queries, cuda's choice): wq_b writes them in bf16 and the tail takes
// them as QueryPrep::src, or, without the tail, the model casts them into f32 q before the norm. Both paths
// must give the same logits bit for bit, and not the f32 queries' (the rounding is there).
TEST(AttentionTail, NativeBf16QueriesSameWithAndWithoutTail) {
    const std::string dir = std::string(DI_TEST_DATA) + "/v4_tiny_fp8";
    Fixture f = load_fixture("v4_tiny_fp8");
    f.model->set_precision(model::Precision::kNative);
    const std::vector<int32_t> prompt(f.prompt.begin(), f.prompt.begin() + 24);
    const std::vector<float> f32_q = run_chunked(*f.model, prompt, {9});
    std::vector<float> got[2];
    for (const bool tail : {false, true}) {
        TailInKernels be(tail, true);
        auto m = runtime::load_model(dir, be);
        ASSERT_TRUE(m.ok()) << m.error().message;
        (*m)->set_precision(model::Precision::kNative);
        got[tail] = run_chunked(**m, prompt, {9});
        EXPECT_GT(be.bf16_out, 0) << "wq_b never wrote bf16 q";
        EXPECT_EQ(be.prepared > 0, tail);
    }
    ASSERT_EQ(got[0].size(), got[1].size());
    for (size_t i = 0; i < got[0].size(); ++i) ASSERT_EQ(got[0][i], got[1][i]) << "logit " << i;
    EXPECT_NE(got[0], f32_q) << "bf16 queries changed nothing";
}

}  // namespace
}  // namespace di::test
