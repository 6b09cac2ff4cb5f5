// A config above what a backend's kernels take is refused when the model loads (one line naming the field
// and the backend), instead of aborting at the first request (the CUDA kernels cap head_dim, index_topk
// and hc_mult).
#include <gtest/gtest.h>

#include "ops/ref/ref_backend.h"
#include "runtime/model_loader.h"

namespace di {
namespace {

// The reference backend with declared kernel limits.
class Limited final : public ops::Backend {
public:
    explicit Limited(ops::KernelLimits l) : lim_(l) {}
    std::string_view name() const override { return "limited"; }
    ops::KernelLimits kernel_limits() const override { return lim_; }
    Allocator& allocator() override { return ref_->allocator(); }
    void copy(const TensorView& d, const TensorView& s) override { ref_->copy(d, s); }
    void fill_zero(const TensorView& d) override { ref_->fill_zero(d); }
    void embed(const ops::EmbedArgs& a) override { ref_->embed(a); }
    void add(const ops::AddArgs& a) override { ref_->add(a); }
    void swiglu(const ops::SwigluArgs& a) override { ref_->swiglu(a); }
    void linear(const ops::LinearArgs& a) override { ref_->linear(a); }
    void rms_norm(const ops::RmsNormArgs& a) override { ref_->rms_norm(a); }
    void rope(const ops::RopeArgs& a) override { ref_->rope(a); }
    void compress(const ops::CompressArgs& a) override { ref_->compress(a); }
    void indexer_topk(const ops::IndexerTopkArgs& a) override { ref_->indexer_topk(a); }
    void attention(const ops::AttentionArgs& a) override { ref_->attention(a); }
    void window_store(const ops::WindowStoreArgs& a) override { ref_->window_store(a); }
    void mhc_pre(const ops::MhcPreArgs& a) override { ref_->mhc_pre(a); }
    void mhc_post(const ops::MhcPostArgs& a) override { ref_->mhc_post(a); }
    void hc_head(const ops::HcHeadArgs& a) override { ref_->hc_head(a); }
    void route(const ops::RouteArgs& a) override { ref_->route(a); }
    void moe(const ops::MoeArgs& a) override { ref_->moe(a); }

private:
    std::unique_ptr<ops::Backend> ref_ = ops::make_ref_backend();
    ops::KernelLimits lim_;
};

const std::string kModel = std::string(DI_TEST_DATA) + "/v4_tiny_fp32";

TEST(KernelLimits, ConfigAboveTheKernelsIsRefusedAtLoad) {
    Limited roomy({4096, 4096, 8});
    EXPECT_TRUE(runtime::load_model(kModel, roomy).ok());
    for (auto [lim, field] : {std::pair{ops::KernelLimits{8, 0, 0}, "'head_dim'"},
                              std::pair{ops::KernelLimits{0, 1, 0}, "'index_topk'"},
                              std::pair{ops::KernelLimits{0, 0, 1}, "'hc_mult'"}}) {
        Limited tight(lim);
        auto m = runtime::load_model(kModel, tight);
        ASSERT_FALSE(m.ok()) << field;
        EXPECT_NE(m.error().message.find(std::string("field ") + field), std::string::npos) << m.error().message;
        EXPECT_NE(m.error().message.find("the limited backend's kernels"), std::string::npos) << m.error().message;
    }
}

}  // namespace
}  // namespace di
