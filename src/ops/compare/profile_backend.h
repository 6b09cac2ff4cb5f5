// Profile mode: runs every op on a subject backend with a synchronize before and after it, and adds up per
// op the wall time, the calls, the bytes the op must move (activations in and out, weights in their packed
// format, for moe the selected experts' weights) and the flops its maths takes (op_flops.h), so a step's
// time can be split by op and each op set against the bandwidth or the tensor-core rate. The synchronisations
// add a few microseconds per op on a GPU (stated beside the table); the op mix and the large ops' times are
// what it is for. With `synchronised` false nothing is synchronised and the times are the host's cost of
// issuing each op (checks, argument set-up, the launch): against the unprofiled step time it shows whether a
// step waits on the host. Batched calls (linears, compresses, indexer_topks, attentions, window_stores,
// attentions_stored, rms_norm_ropes) reach the subject batched, as the engine issues them (one launch for a
// whole decode batch where the backend batches); their time is one measurement split over the jobs' rows by
// the jobs' flops (by their bytes where they have none), each job one call. An attention layer's tail
// (attentions_stored) is timed whole: its window stores and the output's rotation, which a backend may run
// inside the attention, count in the attention rows.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "ops/backend.h"

namespace di::ops {

struct OpProfile {
    std::string op;
    int64_t calls = 0;
    double seconds = 0;
    double bytes = 0;
    double flops = 0;  // op_flops.h; 0 for the bandwidth ops
};

class ProfileBackend final : public Backend {
  public:
    explicit ProfileBackend(Backend& subject, bool synchronised = true)
        : subject_(subject), sync_(synchronised) {}

    std::string_view name() const override { return subject_.name(); }
    Allocator& allocator() override { return subject_.allocator(); }
    std::optional<BoundScales> fp8_block_scales(const TensorView& s) override {
        return subject_.fp8_block_scales(s);
    }
    void copy(const TensorView& dst, const TensorView& src) override { subject_.copy(dst, src); }
    void copy_many(std::span<const CopyPair> pairs) override { subject_.copy_many(pairs); }
    void fill_zero(const TensorView& dst) override { subject_.fill_zero(dst); }
    void synchronize() override { subject_.synchronize(); }
    void set_scope(std::string_view s) override { subject_.set_scope(s); }
    std::vector<KernelVariant> kernel_variants() const override { return subject_.kernel_variants(); }
    void set_allow_list(const AllowList& l) override { subject_.set_allow_list(l); }
    int64_t dispatch_count(std::string_view op, std::string_view v) const override {
        return subject_.dispatch_count(op, v);
    }
    bool force_variant(std::string_view op, std::string_view v) override {
        return subject_.force_variant(op, v);
    }
    KernelLimits kernel_limits() const override { return subject_.kernel_limits(); }

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
    void act_quant(const ActQuantArgs& a) override;
    void argmax(const ArgmaxArgs& a) override;
    void top_candidates(const TopCandidatesArgs& a) override;
    void moe(const MoeArgs& a) override;
    void linears(std::span<const LinearArgs> jobs) override;
    void compresses(std::span<const CompressArgs> jobs) override;
    void indexer_topks(std::span<const IndexerTopkArgs> jobs) override;
    void attentions(std::span<const AttentionArgs> jobs) override;
    void window_stores(std::span<const WindowStoreArgs> jobs) override;
    void attentions_stored(std::span<const AttentionArgs> jobs, std::span<const WindowStoreArgs> stores,
                           const RopeArgs& out_rope, const QueryPrep* q_prep,
                           const ActQuantArgs* out_quant) override;
    bool fuses_attention_tail(std::span<const int64_t> chunk_queries, int64_t n_heads, int64_t head_dim,
                              bool f16) const override {
        return subject_.fuses_attention_tail(chunk_queries, n_heads, head_dim, f16);
    }
    void rms_norm_ropes(std::span<const RmsNormArgs> norms, std::span<const RopeArgs> ropes) override;
    // The fused pairs are timed as one op each (the subject may run them as one launch).
    void rms_norm_rope(const RmsNormArgs& n, const RopeArgs& r) override;
    void mhc_pre_norm(const MhcPreArgs& pre, const RmsNormArgs& n) override;
    void hc_head_norm(const HcHeadArgs& head, const RmsNormArgs& n) override;
    void add_mhc_post(const AddArgs& sum, const MhcPostArgs& post) override;

    // By shape: linear's rows apart by weight format and in -> out ("linear fp8 4096->1024"), attention's by
    // what the call attends to besides its window ("attention window", "attention csa": picked compressed
    // entries, "attention hca": all of them), so a prefill's time can be laid on the GEMM table's shapes.
    void set_by_shape(bool on) { by_shape_ = on; }
    // Ops by total time, largest first; reset() starts a new measurement.
    std::vector<OpProfile> table() const;
    void reset() { ops_.clear(); }
    // A markdown table: op, calls, ms, share, bytes, GB/s (and % of `copy_gbps` when it is > 0), GFLOP and
    // TFLOP/s (blank for the bandwidth ops).
    std::string markdown(double copy_gbps = 0) const { return markdown_of(table(), copy_gbps); }
    static std::string markdown_of(const std::vector<OpProfile>& table, double copy_gbps = 0);

  private:
    // count_views: add every tensor the Args visit (in and out) to `weight_bytes`.
    template <class Args, class Fn>
    void timed(const std::string& op, Args a, double weight_bytes, Fn&& run, bool count_views = true,
               double flops = 0);
    // One batched call: its time split over the jobs' rows by flops (by bytes where none has flops).
    struct JobCost {
        std::string op;
        double bytes = 0, flops = 0;
    };
    template <class Fn>
    void timed_jobs(const std::vector<JobCost>& jobs, Fn&& run);
    // The row and the flops of an attention job (its picks read back where it has them).
    JobCost attention_cost(const AttentionArgs& a);
    // A device i32 tensor's values on the host, row-major (the op is synchronised anyway).
    std::vector<int32_t> host_ids(const TensorView& v);

    Backend& subject_;
    bool sync_;
    bool by_shape_ = false;
    std::map<std::string, OpProfile> ops_;
};

// Bytes of a weight in its stored format (data and scales).
double weight_bytes(const QWeight& w);
// The by-shape names (ProfileBackend::set_by_shape).
std::string linear_shape_name(const QWeight& w);
std::string attention_kind_name(CompMask m);

}  // namespace di::ops
