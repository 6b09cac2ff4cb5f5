#include "ops/compare/profile_backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "ops/compare/op_flops.h"

namespace di::ops {

double weight_bytes(const QWeight& w) { return double(w.data.nbytes()) + double(w.scale.nbytes()); }

std::string linear_shape_name(const QWeight& w) {
    return fmt::format("linear {} {}->{}", weight_format_name(w), w.in_dim, w.out_dim);
}

std::string attention_kind_name(CompMask m) {
    switch (m) {
        case CompMask::kNone:
            return "attention window";
        case CompMask::kCausal:
            return "attention hca";
        case CompMask::kPicks:
            return "attention csa";
    }
    return "attention";
}

// The bytes of every tensor an op's arguments visit (in and out).
template <class Args>
double view_bytes(Args a) {
    double bytes = 0;
    a.visit([&](const char*, const TensorView& v, Role) { bytes += double(v.nbytes()); });
    return bytes;
}

template <class Fn>
void ProfileBackend::timed_jobs(const std::vector<JobCost>& jobs, Fn&& run) {
    if (sync_) subject_.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    run();
    if (sync_) subject_.synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double flops = 0, bytes = 0;
    for (const JobCost& j : jobs) flops += j.flops, bytes += j.bytes;
    for (const JobCost& j : jobs) {
        const double share = flops > 0   ? j.flops / flops
                             : bytes > 0 ? j.bytes / bytes
                                         : 1.0 / double(jobs.size());
        OpProfile& p = ops_[j.op];
        p.op = j.op;
        ++p.calls;
        p.seconds += seconds * share;
        p.bytes += j.bytes;
        p.flops += j.flops;
    }
}

template <class Args, class Fn>
void ProfileBackend::timed(const std::string& op, Args a, double wbytes, Fn&& run, bool count_views,
                           double flops) {
    timed_jobs({{op, wbytes + (count_views ? view_bytes(a) : 0.0), flops}}, run);
}

std::vector<int32_t> ProfileBackend::host_ids(const TensorView& v) {
    std::vector<int32_t> ids(size_t(v.numel()));
    if (ids.empty()) return ids;
    Tensor h(host_allocator(), DType::kI32, {v.numel()});
    subject_.copy(h.view(), v.reshape({v.numel()}));
    std::copy(h.view().ptr<int32_t>(), h.view().ptr<int32_t>() + ids.size(), ids.begin());
    return ids;
}

void ProfileBackend::embed(const EmbedArgs& a) {
    // one table row per token read, not the whole table: ids in, rows read, rows written
    const double row = a.table.ndim == 2 ? double(a.table.shape[1]) * double(dtype_size(a.table.dtype)) : 0;
    const double bytes = double(a.tokens.nbytes()) + row * double(a.tokens.numel()) + double(a.out.nbytes());
    timed(
        "embed", a, bytes, [&] { subject_.embed(a); }, false);
}
void ProfileBackend::cast(const CastArgs& a) {
    timed("cast", a, 0, [&] { subject_.cast(a); });
}
void ProfileBackend::add(const AddArgs& a) {
    timed("add", a, 0, [&] { subject_.add(a); });
}
void ProfileBackend::swiglu(const SwigluArgs& a) {
    timed("swiglu", a, 0, [&] { subject_.swiglu(a); });
}
void ProfileBackend::linear(const LinearArgs& a) {
    timed(
        by_shape_ ? linear_shape_name(a.w) : "linear", a, weight_bytes(a.w), [&] { subject_.linear(a); },
        true, linear_flops(a));
}
void ProfileBackend::act_quant(const ActQuantArgs& a) {
    timed("act_quant", a, 0, [&] { subject_.act_quant(a); });
}
void ProfileBackend::rms_norm(const RmsNormArgs& a) {
    timed("rms_norm", a, double(a.weight.nbytes()), [&] { subject_.rms_norm(a); });
}
void ProfileBackend::rope(const RopeArgs& a) {
    timed("rope", a, 0, [&] { subject_.rope(a); });
}
void ProfileBackend::compress(const CompressArgs& a) {
    timed("compress", a, 0, [&] { subject_.compress(a); });
}
void ProfileBackend::indexer_topk(const IndexerTopkArgs& a) {
    timed(
        "indexer_topk", a, 0, [&] { subject_.indexer_topk(a); }, true, indexer_flops(a));
}
ProfileBackend::JobCost ProfileBackend::attention_cost(const AttentionArgs& a) {
    const std::vector<int32_t> picks =
        a.comp_mask == CompMask::kPicks ? host_ids(a.picks) : std::vector<int32_t>{};
    return {by_shape_ ? attention_kind_name(a.comp_mask) : "attention", view_bytes(a),
            attention_flops(a, picks)};
}
void ProfileBackend::attention(const AttentionArgs& a) {
    timed_jobs({attention_cost(a)}, [&] { subject_.attention(a); });
}
void ProfileBackend::window_store(const WindowStoreArgs& a) {
    timed("window_store", a, 0, [&] { subject_.window_store(a); });
}
void ProfileBackend::linears(std::span<const LinearArgs> jobs) {
    std::vector<JobCost> cost;
    for (const LinearArgs& a : jobs)
        cost.push_back({by_shape_ ? linear_shape_name(a.w) : "linear", weight_bytes(a.w) + view_bytes(a),
                        linear_flops(a)});
    timed_jobs(cost, [&] { subject_.linears(jobs); });
}
void ProfileBackend::compresses(std::span<const CompressArgs> jobs) {
    std::vector<JobCost> cost;
    for (const CompressArgs& a : jobs) cost.push_back({"compress", view_bytes(a), 0});
    timed_jobs(cost, [&] { subject_.compresses(jobs); });
}
void ProfileBackend::indexer_topks(std::span<const IndexerTopkArgs> jobs) {
    std::vector<JobCost> cost;
    for (const IndexerTopkArgs& a : jobs) cost.push_back({"indexer_topk", view_bytes(a), indexer_flops(a)});
    timed_jobs(cost, [&] { subject_.indexer_topks(jobs); });
}
void ProfileBackend::attentions(std::span<const AttentionArgs> jobs) {
    std::vector<JobCost> cost;
    for (const AttentionArgs& a : jobs) cost.push_back(attention_cost(a));
    timed_jobs(cost, [&] { subject_.attentions(jobs); });
}
void ProfileBackend::window_stores(std::span<const WindowStoreArgs> jobs) {
    std::vector<JobCost> cost;
    for (const WindowStoreArgs& a : jobs) cost.push_back({"window_store", view_bytes(a), 0});
    timed_jobs(cost, [&] { subject_.window_stores(jobs); });
}
void ProfileBackend::attentions_stored(std::span<const AttentionArgs> jobs,
                                       std::span<const WindowStoreArgs> stores, const RopeArgs& out_rope,
                                       const QueryPrep* q_prep, const ActQuantArgs* out_quant) {
    std::vector<JobCost> cost;
    for (const AttentionArgs& a : jobs) cost.push_back(attention_cost(a));
    for (size_t i = 0; i < stores.size() && i < cost.size(); ++i) cost[i].bytes += view_bytes(stores[i]);
    if (!cost.empty()) cost[0].bytes += view_bytes(out_rope);  // the rotation of every job's rows
    timed_jobs(cost, [&] { subject_.attentions_stored(jobs, stores, out_rope, q_prep, out_quant); });
}
void ProfileBackend::rms_norm_ropes(std::span<const RmsNormArgs> norms, std::span<const RopeArgs> ropes) {
    std::vector<JobCost> cost;
    for (const RmsNormArgs& n : norms)
        cost.push_back({"rms_norm_rope", double(n.weight.nbytes()) + view_bytes(n), 0});
    timed_jobs(cost, [&] { subject_.rms_norm_ropes(norms, ropes); });
}
void ProfileBackend::mhc_pre(const MhcPreArgs& a) {
    timed(
        "mhc_pre", a, double(a.fn.nbytes()), [&] { subject_.mhc_pre(a); }, true, mhc_pre_flops(a));
}
void ProfileBackend::mhc_post(const MhcPostArgs& a) {
    timed("mhc_post", a, 0, [&] { subject_.mhc_post(a); });
}
void ProfileBackend::hc_head(const HcHeadArgs& a) {
    timed(
        "hc_head", a, double(a.fn.nbytes()), [&] { subject_.hc_head(a); }, true, hc_head_flops(a));
}
void ProfileBackend::route(const RouteArgs& a) {
    timed("route", a, 0, [&] { subject_.route(a); });
}

void ProfileBackend::argmax(const ArgmaxArgs& a) {
    timed("argmax", a, 0, [&] { subject_.argmax(a); });
}

void ProfileBackend::top_candidates(const TopCandidatesArgs& a) {
    timed("top_candidates", a, 0, [&] { subject_.top_candidates(a); });
}

void ProfileBackend::moe(const MoeArgs& a) {
    // The selected experts' weights, each counted once: the ids are read back (the op is synchronised
    // anyway).
    const std::vector<int32_t> ids = host_ids(a.ids);
    double wbytes = 0;
    for (const int32_t e : std::set<int32_t>(ids.begin(), ids.end()))
        if (e >= 0 && e < a.n_experts) {
            const ExpertWeights& w = a.experts[e];
            wbytes += weight_bytes(w.w1) + weight_bytes(w.w2) + weight_bytes(w.w3);
        }
    timed(
        "moe", a, wbytes, [&] { subject_.moe(a); }, true, moe_flops(a, ids));
}

void ProfileBackend::rms_norm_rope(const RmsNormArgs& n, const RopeArgs& r) {
    timed("rms_norm_rope", n, double(n.weight.nbytes()), [&] { subject_.rms_norm_rope(n, r); });
}
void ProfileBackend::mhc_pre_norm(const MhcPreArgs& pre, const RmsNormArgs& n) {
    const double norm_bytes = double(n.weight.nbytes()) + double(n.y.nbytes());
    timed(
        "mhc_pre_norm", pre, double(pre.fn.nbytes()) + norm_bytes, [&] { subject_.mhc_pre_norm(pre, n); },
        true, mhc_pre_flops(pre));
}
void ProfileBackend::hc_head_norm(const HcHeadArgs& head, const RmsNormArgs& n) {
    const double norm_bytes = double(n.weight.nbytes()) + double(n.y.nbytes());
    timed(
        "hc_head_norm", head, double(head.fn.nbytes()) + norm_bytes, [&] { subject_.hc_head_norm(head, n); },
        true, hc_head_flops(head));
}
void ProfileBackend::add_mhc_post(const AddArgs& sum, const MhcPostArgs& post) {
    timed("add_mhc_post", post, double(sum.b.nbytes()), [&] { subject_.add_mhc_post(sum, post); });
}

std::vector<OpProfile> ProfileBackend::table() const {
    std::vector<OpProfile> v;
    for (const auto& [k, p] : ops_) v.push_back(p);
    std::sort(v.begin(), v.end(),
              [](const OpProfile& a, const OpProfile& b) { return a.seconds > b.seconds; });
    return v;
}

std::string ProfileBackend::markdown_of(const std::vector<OpProfile>& t, double copy_gbps) {
    double total = 0, total_flops = 0;
    for (const auto& p : t) total += p.seconds, total_flops += p.flops;
    auto flops_cells = [](double flops, double seconds) {
        const double tflops = seconds > 0 ? flops / seconds / 1e12 : 0;
        return flops > 0 ? fmt::format(" {:.1f} | {:.{}f} |", flops / 1e9, tflops, tflops < 10 ? 2 : 1)
                         : std::string(" | |");
    };
    std::string md = "| op | calls | ms | share | MB moved | GB/s |" +
                     std::string(copy_gbps > 0 ? " % copy BW |" : "") + " GFLOP | TFLOP/s |" +
                     "\n|---|---:|---:|---:|---:|---:|" + (copy_gbps > 0 ? "---:|" : "") + "---:|---:|\n";
    for (const auto& p : t) {
        const double gbps = p.seconds > 0 ? p.bytes / p.seconds / 1e9 : 0;
        md += fmt::format("| {} | {} | {:.3f} | {:.1f}% | {:.1f} | {:.0f} |", p.op, p.calls, 1e3 * p.seconds,
                          total > 0 ? 100 * p.seconds / total : 0, p.bytes / 1e6, gbps);
        if (copy_gbps > 0) md += fmt::format(" {:.1f}% |", 100 * gbps / copy_gbps);
        md += flops_cells(p.flops, p.seconds) + "\n";
    }
    md += fmt::format("| total | | {:.3f} | 100% | | |{}", 1e3 * total, copy_gbps > 0 ? " |" : "") +
          flops_cells(total_flops, total) + "\n";
    return md;
}

}  // namespace di::ops
