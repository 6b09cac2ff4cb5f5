// A backend whose attention kernels take the layer's tail (Backend::fuses_attention_tail: the cuda backend's
// attention_wgp on V4-Flash's prefill shapes) gets the queries' norm and rotation in attentions_stored's
// QueryPrep instead of beside kv's, and, in the native precision, the output to quantise there for wo_a's
// groups, which then read the codes (LinearArgs' pre-quantised x). Here a reference backend claims so and
// runs the default tail (prepare, attend, store, rotate, quantise): the logits must equal the plain
// reference's bit for bit in both precisions, so the model hands over exactly the norm, rotation and
// quantisation it ran before, on every chunk and layer kind.
#include <gtest/gtest.h>

#include "model_fixture.h"
#include "ref_forwarding_backend.h"
#include "runtime/model_loader.h"

namespace di::test {
namespace {

class TailInKernels final : public RefForwarding {
  public:
    std::string_view name() const override { return "tail-in-kernels"; }
    bool fuses_attention_tail(std::span<const int64_t>, int64_t, int64_t, bool) const override {
        return true;
    }
    void attentions_stored(std::span<const ops::AttentionArgs> jobs,
                           std::span<const ops::WindowStoreArgs> stores, const ops::RopeArgs& out_rope,
                           const ops::QueryPrep* q_prep, const ops::ActQuantArgs* out_quant) override {
        prepared += q_prep != nullptr, quantised += out_quant != nullptr;
        Backend::attentions_stored(jobs, stores, out_rope, q_prep, out_quant);
    }
    void linear(const ops::LinearArgs& a) override {
        prequantised += a.x.dtype == DType::kF8E4M3;
        RefForwarding::linear(a);
    }
    int prepared = 0, quantised = 0, prequantised = 0;
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

}  // namespace
}  // namespace di::test
