// The prefix cache's bookkeeping with stand-in states (no model): keep points, the longest cached prefix
// shorter than the prompt, least-recently-used eviction that spares held hits, and byte totals.
#include "runtime/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>

namespace di::runtime {
namespace {

class FakeState final : public model::SequenceState {
  public:
    explicit FakeState(int64_t n) : SequenceState(n) { n_tokens_ = n; }
    void reset() override { n_tokens_ = 0; }
    bool copy_from(const SequenceState& f) override {
        n_tokens_ = f.n_tokens();
        return true;
    }
    void fill_synthetic(int64_t, uint32_t) override {}
};

std::vector<int32_t> iota(int n, int32_t from = 0) {
    std::vector<int32_t> v(size_t(n), 0);
    std::iota(v.begin(), v.end(), from);
    return v;
}

void keep(PrefixCache& c, std::span<const int32_t> prefix, int64_t bytes) {
    c.insert(prefix, std::make_unique<FakeState>(int64_t(prefix.size())), bytes);
}

TEST(PrefixCache, KeepPointIsTheLastBoundaryBeforeTheLastToken) {
    PrefixCache c(8);
    EXPECT_EQ(c.keep_point(1), 0);
    EXPECT_EQ(c.keep_point(8), 0);  // its last token must still run for the logits
    EXPECT_EQ(c.keep_point(9), 8);
    EXPECT_EQ(c.keep_point(16), 8);
    EXPECT_EQ(c.keep_point(17), 16);
    // kept: the keep point and the power-of-two boundaries before it
    std::vector<int64_t> kept;
    for (int64_t at = 0; at <= 100; ++at)
        if (c.keeps(at, 90)) kept.push_back(at);
    EXPECT_EQ(kept, (std::vector<int64_t>{8, 16, 32, 64, 88}));
    EXPECT_FALSE(c.keeps(96, 90));
}

TEST(PrefixCache, FindsTheLongestCachedPrefixShorterThanThePrompt) {
    PrefixCache c(4);
    const std::vector<int32_t> p = iota(20);
    keep(c, std::span(p).first(4), 10);
    keep(c, std::span(p).first(12), 30);
    EXPECT_EQ(c.size(), 2u);
    EXPECT_EQ(c.bytes(), 40);
    auto hit = c.lookup(p);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->n_tokens, 12);
    EXPECT_EQ(hit->state->n_tokens(), 12);
    // the same 12 tokens as a whole prompt: only the 4-token entry leaves a token to run
    hit = c.lookup(std::span(p).first(12));
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->n_tokens, 4);
    // a prompt that differs inside the second chunk finds only the first
    std::vector<int32_t> q = p;
    q[6] = 99;
    hit = c.lookup(q);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->n_tokens, 4);
    q[0] = 99;
    EXPECT_FALSE(c.lookup(q));
    EXPECT_TRUE(c.contains(std::span(p).first(12)));
    EXPECT_FALSE(c.contains(std::span(p).first(8)));
    EXPECT_EQ(c.cached_length(c.boundary_keys(p)), 12);  // keys to the keep point 16: 12 is the longest kept
    EXPECT_EQ(c.cached_length(c.boundary_keys(q)), 0);
    keep(c, std::span(p).first(12), 30);  // kept already: nothing changes
    EXPECT_EQ(c.size(), 2u);
    EXPECT_EQ(c.bytes(), 40);
}

TEST(PrefixCache, ASaltedEntryServesOnlyItsSalt) {
    PrefixCache c(4);
    const std::vector<int32_t> p = iota(9);
    c.insert(std::span(p).first(8), std::make_unique<FakeState>(8), 10, "tenant-a");
    EXPECT_FALSE(c.lookup(p));
    EXPECT_FALSE(c.lookup(p, "tenant-b"));
    EXPECT_FALSE(c.lookup(p, "tenant-"));
    ASSERT_TRUE(c.lookup(p, "tenant-a"));
    EXPECT_EQ(c.lookup(p, "tenant-a")->n_tokens, 8);
    EXPECT_FALSE(c.contains(std::span(p).first(8)));
    EXPECT_TRUE(c.contains(std::span(p).first(8), "tenant-a"));
    keep(c, std::span(p).first(8), 10);  // the same tokens unsalted: another entry
    EXPECT_EQ(c.size(), 2u);
    EXPECT_TRUE(c.lookup(p));
}

TEST(PrefixCache, EvictsLeastRecentlyUsedAndSparesHeldHits) {
    PrefixCache c(2);
    const std::vector<int32_t> a = iota(10, 0), b = iota(10, 100), d = iota(10, 200);
    keep(c, std::span(a).first(2), 5);
    keep(c, std::span(b).first(2), 7);
    keep(c, std::span(d).first(2), 11);
    ASSERT_TRUE(c.lookup(a));  // a is now the most recently used, b the least
    EXPECT_EQ(c.evict(1), 7);
    EXPECT_FALSE(c.contains(std::span(b).first(2)));
    auto held = c.lookup(d);  // d most recent, a least, but a is held below
    auto held_a = c.lookup(a);
    ASSERT_TRUE(held && held_a);
    EXPECT_EQ(c.evict(100), 0);  // both held
    held_a.reset();
    EXPECT_EQ(c.evict(100), 5);
    EXPECT_EQ(c.size(), 1u);
    EXPECT_EQ(c.bytes(), 11);
    held.reset();
    EXPECT_EQ(c.evict(1), 11);
    EXPECT_EQ(c.size(), 0u);
    EXPECT_EQ(c.bytes(), 0);
    EXPECT_FALSE(c.lookup(d));
}

}  // namespace
}  // namespace di::runtime
