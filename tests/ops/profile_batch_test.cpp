// Profile mode's batched calls: they reach the subject batched (one call, as the engine issues them, so a
// batched decode step is timed on the path it runs), each job counts as a call on its row, and the one time
// is split over the rows by the jobs' flops.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/compare/profile_backend.h"

using namespace di;
using namespace di::ops;

namespace {

// Records the calls that reach it; computes nothing.
class RecordingBackend final : public Backend {
  public:
    std::vector<std::string> calls;
    std::string_view name() const override { return "recording"; }
    Allocator& allocator() override { return host_allocator(); }
    void copy(const TensorView&, const TensorView&) override {}
    void fill_zero(const TensorView&) override {}
    void embed(const EmbedArgs&) override { calls.push_back("embed"); }
    void add(const AddArgs&) override { calls.push_back("add"); }
    void swiglu(const SwigluArgs&) override { calls.push_back("swiglu"); }
    void linear(const LinearArgs&) override { calls.push_back("linear"); }
    void linears(std::span<const LinearArgs> jobs) override {
        calls.push_back("linears " + std::to_string(jobs.size()));
    }
    void rms_norm(const RmsNormArgs&) override { calls.push_back("rms_norm"); }
    void rope(const RopeArgs&) override { calls.push_back("rope"); }
    void compress(const CompressArgs&) override { calls.push_back("compress"); }
    void indexer_topk(const IndexerTopkArgs&) override { calls.push_back("indexer_topk"); }
    void attention(const AttentionArgs&) override { calls.push_back("attention"); }
    void window_store(const WindowStoreArgs&) override { calls.push_back("window_store"); }
    void attentions_stored(std::span<const AttentionArgs> jobs, std::span<const WindowStoreArgs>,
                           const RopeArgs&, const QueryPrep*, const ActQuantArgs*) override {
        calls.push_back("attentions_stored " + std::to_string(jobs.size()));
    }
    void mhc_pre(const MhcPreArgs&) override { calls.push_back("mhc_pre"); }
    void mhc_post(const MhcPostArgs&) override { calls.push_back("mhc_post"); }
    void hc_head(const HcHeadArgs&) override { calls.push_back("hc_head"); }
    void route(const RouteArgs&) override { calls.push_back("route"); }
    void moe(const MoeArgs&) override { calls.push_back("moe"); }
};

Tensor host(DType t, std::initializer_list<int64_t> shape) { return Tensor::zeros_host(t, shape); }

const OpProfile* row(const std::vector<OpProfile>& t, const std::string& op) {
    for (const OpProfile& p : t)
        if (p.op == op) return &p;
    return nullptr;
}

}  // namespace

TEST(ProfileBatch, LinearsReachTheSubjectOnceAndSplitByFlops) {
    RecordingBackend subject;
    ProfileBackend prof(subject);
    prof.set_by_shape(true);
    const Tensor x = host(DType::kF32, {3, 8}), y1 = host(DType::kF32, {3, 4}),
                 y2 = host(DType::kF32, {3, 12});
    LinearArgs a, b;
    a.x = x, a.y = y1, a.w.out_dim = 4, a.w.in_dim = 8;
    b.x = x, b.y = y2, b.w.out_dim = 12, b.w.in_dim = 8;
    const LinearArgs jobs[] = {a, b};
    prof.linears(jobs);
    ASSERT_EQ(subject.calls, std::vector<std::string>{"linears 2"});
    const std::vector<OpProfile> t = prof.table();
    const OpProfile* ra = row(t, linear_shape_name(a.w));
    const OpProfile* rb = row(t, linear_shape_name(b.w));
    ASSERT_NE(ra, nullptr);
    ASSERT_NE(rb, nullptr);
    EXPECT_EQ(ra->calls, 1);
    EXPECT_EQ(rb->calls, 1);
    EXPECT_EQ(ra->flops, 2.0 * 3 * 4 * 8);
    EXPECT_EQ(rb->flops, 2.0 * 3 * 12 * 8);
    // one measurement, split 1 : 3 by the flops
    EXPECT_NEAR(rb->seconds, 3 * ra->seconds, 1e-12 + 1e-9 * rb->seconds);
}

TEST(ProfileBatch, AnAttentionTailIsTimedWholeOnTheAttentionRows) {
    RecordingBackend subject;
    ProfileBackend prof(subject);
    const Tensor q = host(DType::kF32, {1, 2, 4}), kv = host(DType::kF32, {1, 4}),
                 ring = host(DType::kF32, {3, 4}), out = host(DType::kF32, {2, 2, 4}),
                 pos = host(DType::kI32, {2});
    std::vector<AttentionArgs> jobs(2);
    std::vector<WindowStoreArgs> stores(2);
    for (int i = 0; i < 2; ++i) {
        jobs[size_t(i)].q = q, jobs[size_t(i)].kv = kv, jobs[size_t(i)].ring = ring,
        jobs[size_t(i)].window = 4;
        jobs[size_t(i)].pos0 = 3 + i, jobs[size_t(i)].n_cached = 3;
        stores[size_t(i)] = {.kv = kv, .ring = ring, .pos0 = 3 + i};
    }
    RopeArgs r;
    r.x = out, r.positions = pos;
    prof.attentions_stored(jobs, stores, r, nullptr, nullptr);
    ASSERT_EQ(subject.calls, std::vector<std::string>{"attentions_stored 2"});
    const std::vector<OpProfile> t = prof.table();
    const OpProfile* att = row(t, "attention");
    ASSERT_NE(att, nullptr);
    EXPECT_EQ(att->calls, 2);
    EXPECT_GT(att->flops, 0);
    EXPECT_EQ(row(t, "window_store"), nullptr);  // inside the attention rows' time
    EXPECT_EQ(row(t, "rope"), nullptr);
}
