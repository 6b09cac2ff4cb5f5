// Compare mode: runs every op on a subject backend and, on host copies of the same inputs, on the reference
// backend; compares every output and remembers the first op whose result diverges beyond the tolerance
// ("layer 3 / attention: attention.out max |d| 2.1e-2 > 1e-3 * max |ref| ..."). The subject's outputs
// flow on, so later ops are compared on identical inputs too. A debugging tool: slow by design.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/backend.h"

namespace di::ops {

struct Divergence {
    std::string scope, op, field;
    double max_diff = 0, max_ref = 0;  // floats: max |subject - ref|, max |ref|; ints: mismatches, count
    std::string describe() const;
};

class CompareBackend final : public Backend {
  public:
    // `rel_tol`: a float output diverges when max |d| > rel_tol * max(|ref|, 1e-6).
    CompareBackend(Backend& subject, double rel_tol);
    ~CompareBackend() override;

    std::string_view name() const override { return "compare"; }
    Allocator& allocator() override { return subject_.allocator(); }
    std::optional<BoundScales> fp8_block_scales(const TensorView& s) override {
        return subject_.fp8_block_scales(s);
    }
    void copy(const TensorView& dst, const TensorView& src) override { subject_.copy(dst, src); }
    void copy_many(std::span<const CopyPair> pairs) override { subject_.copy_many(pairs); }
    void fill_zero(const TensorView& dst) override { subject_.fill_zero(dst); }
    void synchronize() override { subject_.synchronize(); }
    void set_scope(std::string_view s) override;
    KernelLimits kernel_limits() const override { return subject_.kernel_limits(); }
    std::vector<KernelVariant> kernel_variants() const override { return subject_.kernel_variants(); }
    void set_allow_list(const AllowList& l) override { subject_.set_allow_list(l); }
    int64_t dispatch_count(std::string_view op, std::string_view v) const override {
        return subject_.dispatch_count(op, v);
    }
    bool force_variant(std::string_view op, std::string_view v) override {
        return subject_.force_variant(op, v);
    }

    void embed(const EmbedArgs& a) override;
    bool bf16_streams() const override { return subject_.bf16_streams(); }
    bool bf16_queries() const override { return subject_.bf16_queries(); }
    void cast(const CastArgs& a) override;
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
    void argmax(const ArgmaxArgs& a) override;
    void act_quant(const ActQuantArgs& a) override;
    void top_candidates(const TopCandidatesArgs& a) override;
    void moe(const MoeArgs& a) override;

    int64_t ops_compared() const { return n_ops_; }
    const std::optional<Divergence>& first_divergence() const { return first_; }
    double worst_relative() const { return worst_rel_; }  // over all float outputs
    std::string worst_where() const { return worst_where_; }

  private:
    struct HostCopy;
    template <class Args, class Fn>
    void compare(const char* op, const Args& args, Fn&& prepare_weights);
    QWeight host_weight(const QWeight& w);
    TensorView host_view(const TensorView& v, std::vector<Tensor>& keep);  // copies the view's span to host

    Backend& subject_;
    std::unique_ptr<Backend> ref_;
    double rel_tol_;
    std::string scope_;
    int64_t n_ops_ = 0;
    std::optional<Divergence> first_;
    double worst_rel_ = 0;
    std::string worst_where_;
    std::map<const void*, Tensor> weight_cache_;  // device weight data -> host copy (weights are immutable)
};

}  // namespace di::ops
