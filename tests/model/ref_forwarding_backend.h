// A test backend that forwards every op to the reference backend; tests derive from it and override the
// ops (or the variant/limit hooks) they plant something in.
#pragma once

#include <memory>
#include <string_view>

#include "ops/ref/ref_backend.h"

namespace di::test {

class RefForwarding : public ops::Backend {
  public:
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

  protected:
    ops::Backend& ref() { return *ref_; }

  private:
    std::unique_ptr<ops::Backend> ref_ = ops::make_ref_backend();
};

}  // namespace di::test
