// RefBackend's declaration, shared by the ref_*.cpp files that implement its op families.
#pragma once

#include "ops/ref/ref_backend.h"

namespace di::ops {

class RefBackend final : public Backend {
  public:
    std::string_view name() const override { return "ref"; }
    Allocator& allocator() override { return host_allocator(); }
    void copy(const TensorView& dst, const TensorView& src) override;
    void fill_zero(const TensorView& dst) override;

    void embed(const EmbedArgs& a) override;
    void add(const AddArgs& a) override;
    void swiglu(const SwigluArgs& a) override;
    void linear(const LinearArgs& a) override;
    void rms_norm(const RmsNormArgs& a) override;
    void rope(const RopeArgs& a) override;
    void compress(const CompressArgs& a) override;
    void indexer_topk(const IndexerTopkArgs& a) override;
    void attention(const AttentionArgs& a) override;
    void window_store(const WindowStoreArgs& a) override;
    void mhc_pre(const MhcPreArgs& a) override;
    void mhc_post(const MhcPostArgs& a) override;
    void hc_head(const HcHeadArgs& a) override;
    void route(const RouteArgs& a) override;
    void moe(const MoeArgs& a) override;
};

// Row r of a 2-d f32 view.
inline float* row_f32(const TensorView& v, int64_t r) { return v.ptr<float>() + r * v.stride[0]; }

}  // namespace di::ops
