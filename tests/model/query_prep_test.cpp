// A backend whose attention kernels take the queries' norm and rotation (Backend::fuses_query_prep: the cuda
// backend's attention_wgp on V4-Flash's prefill shapes) gets them in attentions_stored's QueryPrep instead of
// beside kv's. Here a reference backend claims so and runs the default tail (prepare, attend, store, rotate):
// the logits must equal the plain reference's bit for bit, so the model hands over exactly the norm and
// rotation it ran before, on every chunk and layer kind.
#include <gtest/gtest.h>

#include "model_fixture.h"
#include "ref_forwarding_backend.h"
#include "runtime/model_loader.h"

namespace di::test {
namespace {

class TailPreparesQueries final : public RefForwarding {
  public:
    std::string_view name() const override { return "tail-prepares-queries"; }
    bool fuses_query_prep(std::span<const int64_t>, int64_t, int64_t, bool) const override { return true; }
    void attentions_stored(std::span<const ops::AttentionArgs> jobs,
                           std::span<const ops::WindowStoreArgs> stores, const ops::RopeArgs& out_rope,
                           const ops::QueryPrep* q_prep) override {
        prepared += q_prep != nullptr;
        Backend::attentions_stored(jobs, stores, out_rope, q_prep);
    }
    int prepared = 0;
};

TEST(QueryPrep, TheTailsPreparationGivesTheSameLogits) {
    Fixture f = load_fixture("v4_tiny_fp8");
    const std::vector<int32_t> prompt(f.prompt.begin(), f.prompt.begin() + 24);
    const std::vector<float> want = run_chunked(*f.model, prompt, {9});
    TailPreparesQueries be;
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp8", be);
    ASSERT_TRUE(m.ok()) << m.error().message;
    const std::vector<float> got = run_chunked(**m, prompt, {9});
    EXPECT_GT(be.prepared, 0) << "the model never handed q's preparation to the tail";
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
}

}  // namespace
}  // namespace di::test
