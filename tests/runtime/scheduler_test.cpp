// Scheduler policy against a fake runner (no model): admission by memory, FCFS, decodes every step,
// prefill chunk boundaries independent of load, the per-step token budget, and the bounded queue.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <utility>

namespace di::runtime {
namespace {

SchedulerConfig config(int64_t budget_bytes, int max_running = 8, int64_t step_budget = 64,
                       int64_t chunk = 16, size_t max_waiting = 100) {
    SchedulerConfig c;
    c.memory_budget_bytes = budget_bytes;
    c.max_running = max_running;
    c.step_token_budget = step_budget;
    c.prefill_chunk = chunk;
    c.max_waiting = max_waiting;
    return c;
}

TEST(Scheduler, AdmitsFcfsWithinMemoryAndFreesOnRemove) {
    Scheduler s(config(100));
    ASSERT_TRUE(s.add({1, 4, 40}).ok());
    ASSERT_TRUE(s.add({2, 4, 40}).ok());
    ASSERT_TRUE(s.add({3, 4, 40}).ok());
    ASSERT_TRUE(s.add({4, 4, 10}).ok());  // would fit, but FCFS keeps it behind 3
    StepPlan p = s.plan();
    EXPECT_EQ(p.admitted, (std::vector<uint64_t>{1, 2}));
    EXPECT_EQ(s.bytes_in_use(), 80);
    EXPECT_EQ(s.n_waiting(), 2);
    s.complete(p);
    EXPECT_TRUE(s.remove(1));
    p = s.plan();
    EXPECT_EQ(p.admitted, (std::vector<uint64_t>{3, 4}));
    EXPECT_EQ(s.bytes_in_use(), 90);
    EXPECT_TRUE(s.remove(2));
    EXPECT_TRUE(s.remove(3));
    EXPECT_TRUE(s.remove(4));
    EXPECT_FALSE(s.remove(4));
    EXPECT_EQ(s.bytes_in_use(), 0);
    EXPECT_TRUE(s.idle());
}

TEST(Scheduler, RefusesWhatCanNeverFitAndAFullQueue) {
    Scheduler s(config(100, 8, 64, 16, 2));
    Status big = s.add({1, 4, 101});
    ASSERT_FALSE(big.ok());
    EXPECT_EQ(big.error().code, ErrorCode::kOutOfRange);
    ASSERT_TRUE(s.add({2, 4, 100}).ok());
    ASSERT_TRUE(s.add({3, 4, 100}).ok());
    Status full = s.add({4, 4, 1});
    ASSERT_FALSE(full.ok());
    EXPECT_EQ(full.error().code, ErrorCode::kCapacity);
}

TEST(Scheduler, RespectsMaxRunning) {
    Scheduler s(config(1000, 2));
    for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(s.add({i, 1, 1}).ok());
    StepPlan p = s.plan();
    EXPECT_EQ(p.admitted.size(), 2u);
    EXPECT_EQ(s.n_running(), 2);
    EXPECT_EQ(s.n_waiting(), 1);
}

TEST(Scheduler, DecodesEveryStepAndPrefillsUnderTheBudget) {
    Scheduler s(config(1000, 8, 20, 16));
    ASSERT_TRUE(s.add({1, 2, 1}).ok());
    StepPlan p = s.plan();  // prefill of 1 (2 tokens, final chunk)
    ASSERT_EQ(p.chunks.size(), 1u);
    EXPECT_TRUE(p.chunks[0].samples);
    s.complete(p);
    ASSERT_TRUE(s.add({2, 40, 1}).ok());
    ASSERT_TRUE(s.add({3, 40, 1}).ok());
    p = s.plan();
    // The decode of 1 comes first; 2's first chunk (16) fits in 19; 3's chunk would exceed it.
    ASSERT_EQ(p.chunks.size(), 2u);
    EXPECT_TRUE(p.chunks[0].decode);
    EXPECT_EQ(p.chunks[0].id, 1u);
    EXPECT_EQ(p.chunks[0].start, 2);
    EXPECT_EQ(p.chunks[1].id, 2u);
    EXPECT_EQ(p.chunks[1].n_tokens, 16);
    EXPECT_FALSE(p.chunks[1].samples);
    EXPECT_LE(p.n_tokens(), 20);
}

TEST(Scheduler, OnePrefillChunkRunsEvenWhenDecodesFillTheBudget) {
    Scheduler s(config(1000, 8, 2, 16));
    for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(s.add({i, 1, 1}).ok());
    s.complete(s.plan());  // budget 2 < 3 prompts of 1, yet each step runs >= 1 chunk
    s.complete(s.plan());
    s.complete(s.plan());
    ASSERT_TRUE(s.add({4, 30, 1}).ok());
    StepPlan p = s.plan();
    int decodes = 0, prefill = 0;
    for (const auto& c : p.chunks) (c.decode ? decodes : prefill) += int(c.n_tokens);
    EXPECT_EQ(decodes, 3);
    EXPECT_EQ(prefill, 16);
}

// A fake runner drives random traffic to completion. Checks: memory stays within budget and returns to
// zero, every sequence's chunking is the canonical one (multiples of the chunk size), every decoding
// sequence advances every step, and every request completes with its full token count.
TEST(Scheduler, RandomTrafficWithFakeRunner) {
    const int64_t chunk = 8, budget_bytes = 500;
    Scheduler s(config(budget_bytes, 6, 24, chunk, 1000));
    std::mt19937 rng(7);
    struct Want {
        int64_t n_prompt, max_new, generated = 0;
        std::vector<int64_t> chunks;
    };
    std::map<uint64_t, Want> live;
    std::map<uint64_t, Want> done;
    uint64_t next = 1;
    for (int step = 0; step < 5000 && (next <= 60 || !s.idle()); ++step) {
        if (next <= 60 && rng() % 3 == 0) {
            Want w{1 + int64_t(rng() % 40), 1 + int64_t(rng() % 12), 0, {}};
            ASSERT_TRUE(s.add({next, w.n_prompt, 20 + int64_t(rng() % 100)}).ok());
            live[next++] = w;
        }
        StepPlan p = s.plan();
        EXPECT_LE(s.bytes_in_use(), budget_bytes);
        for (const auto& c : p.chunks) {
            Want& w = live.at(c.id);
            if (!c.decode) w.chunks.push_back(c.n_tokens);
            if (c.samples) ++w.generated;
        }
        for (auto& [id, w] : live) {
            const bool in_plan =
                std::any_of(p.chunks.begin(), p.chunks.end(), [&](auto& c) { return c.id == id; });
            if (w.generated > 0 && w.generated < w.max_new) {
                EXPECT_TRUE(in_plan) << "decode of " << id << " starved";
            }
        }
        s.complete(p);
        for (auto it = live.begin(); it != live.end();) {
            if (it->second.generated == it->second.max_new) {
                EXPECT_TRUE(s.remove(it->first));
                done[it->first] = it->second;
                it = live.erase(it);
            } else {
                ++it;
            }
        }
    }
    EXPECT_TRUE(live.empty());
    EXPECT_EQ(done.size(), 60u);
    EXPECT_EQ(s.bytes_in_use(), 0);
    for (const auto& [id, w] : done) {
        std::vector<int64_t> canon;
        for (int64_t at = 0; at < w.n_prompt; at += chunk) canon.push_back(std::min(chunk, w.n_prompt - at));
        EXPECT_EQ(w.chunks, canon) << "request " << id;
    }
}

// Cached memory (a prefix cache's states) uses only what no sequence reserves and gives way to admission;
// a sequence admitted with cached prompt tokens starts its first chunk after them, on the same boundaries.
TEST(Scheduler, CachedMemoryGivesWayAndPrefilledTokensAreSkipped) {
    Scheduler s(config(100, 8, 64, 16));
    ASSERT_TRUE(s.add({1, 40, 50}).ok());
    StepPlan p = s.plan();
    EXPECT_TRUE(s.reserve_cached(30));
    EXPECT_FALSE(s.reserve_cached(21));  // 50 reserved + 30 cached + 21 > 100
    EXPECT_TRUE(s.reserve_cached(20));
    EXPECT_EQ(s.bytes_cached(), 50);
    ASSERT_TRUE(s.add({2, 40, 30}).ok());
    std::vector<int64_t> asked;
    AdmissionHooks h;
    h.reclaim = [&](int64_t need, int) {
        asked.push_back(need);
        return int64_t(30);  // an entry of 30 bytes gives way
    };
    h.prefilled = [](uint64_t id) { return id == 2 ? int64_t(32) : int64_t(0); };
    p = s.plan(h);
    EXPECT_EQ(asked, (std::vector<int64_t>{30}));
    EXPECT_EQ(p.admitted, (std::vector<uint64_t>{2}));
    EXPECT_EQ(s.bytes_cached(), 20);
    EXPECT_EQ(s.bytes_in_use(), 80);
    bool found = false;
    for (const ScheduledChunk& c : p.chunks)
        if (c.id == 2) {
            found = true;
            EXPECT_EQ(c.start, 32);
            EXPECT_EQ(c.n_tokens, 8);
            EXPECT_TRUE(c.samples);
        }
    EXPECT_TRUE(found);
    // nothing more to give: the next one waits
    ASSERT_TRUE(s.add({3, 4, 20}).ok());
    h.reclaim = [](int64_t, int) { return int64_t(0); };
    p = s.plan(h);
    EXPECT_TRUE(p.admitted.empty());
    s.release_cached(20);
    p = s.plan(h);
    EXPECT_EQ(p.admitted, (std::vector<uint64_t>{3}));
}

// A deferred sequence keeps its place while those behind it are admitted; a sequence that does not fit still
// stops admission for those behind it.
TEST(Scheduler, ADeferredSequenceKeepsItsPlace) {
    Scheduler s(config(100));
    ASSERT_TRUE(s.add({1, 4, 10}).ok());
    ASSERT_TRUE(s.add({2, 4, 10}).ok());
    ASSERT_TRUE(s.add({3, 4, 95}).ok());
    ASSERT_TRUE(s.add({4, 4, 10}).ok());
    AdmissionHooks h;
    h.defer = [](uint64_t id) { return id == 1; };
    StepPlan p = s.plan(h);
    EXPECT_EQ(p.admitted, (std::vector<uint64_t>{2}));  // 3 does not fit: 4 waits behind it
    EXPECT_EQ(s.n_waiting(), 3);
    s.complete(p);
    EXPECT_TRUE(s.remove(2));
    h.defer = [](uint64_t) { return false; };
    p = s.plan(h);
    EXPECT_EQ(p.admitted, (std::vector<uint64_t>{1}));  // first again; 3 still does not fit beside it
    EXPECT_TRUE(s.remove(1));
    p = s.plan(h);
    EXPECT_EQ(p.admitted, (std::vector<uint64_t>{3}));
}

// Two homes (an expert-parallel model's ranks) split the budget, the remainder to home 0; each sequence lives
// in the home with the most room and only fits where one home has room for it; cached memory is a home's, and
// admission reclaims it only in the home where that makes room.
TEST(Scheduler, HomesEachHoldTheirShare) {
    SchedulerConfig c = config(101);
    c.homes = 2;
    Scheduler s(c);
    EXPECT_EQ(s.unused(0), 51);
    EXPECT_EQ(s.unused(1), 50);
    const Status big = s.add({1, 4, 52});  // fits the whole budget, not one home's share
    ASSERT_FALSE(big.ok());
    EXPECT_EQ(big.error().code, ErrorCode::kOutOfRange);
    EXPECT_NE(big.error().message.find("one rank's share"), std::string::npos) << big.error().message;
    ASSERT_TRUE(s.add({2, 4, 30}).ok());
    ASSERT_TRUE(s.add({3, 4, 20}).ok());
    ASSERT_TRUE(s.add({5, 4, 35}).ok());  // then 51 bytes free in all, 21 and 30 in the homes: waits
    StepPlan p = s.plan();
    EXPECT_EQ(p.admitted, (std::vector<uint64_t>{2, 3}));
    EXPECT_EQ(s.home_of(2), 0);
    EXPECT_EQ(s.home_of(3), 1);
    EXPECT_EQ(s.home_of(5), -1);  // waiting
    EXPECT_EQ(s.bytes_in_use(0), 30);
    EXPECT_EQ(s.bytes_in_use(1), 20);
    EXPECT_EQ(s.bytes_in_use(), 50);
    s.complete(p);
    EXPECT_TRUE(s.remove(5));
    // home 1's cache can make room for 4, home 0's cannot: reclaim is asked in home 1 only
    EXPECT_TRUE(s.reserve_cached(15, 0));
    EXPECT_TRUE(s.reserve_cached(25, 1));
    EXPECT_FALSE(s.reserve_cached(6, 1));
    EXPECT_EQ(s.bytes_cached(), 40);
    ASSERT_TRUE(s.add({4, 4, 28}).ok());
    std::vector<std::pair<int64_t, int>> asked;
    AdmissionHooks h;
    h.reclaim = [&](int64_t need, int home) {
        asked.emplace_back(need, home);
        return need;
    };
    p = s.plan(h);
    EXPECT_EQ(asked, (std::vector<std::pair<int64_t, int>>{{23, 1}}));
    EXPECT_EQ(p.admitted, (std::vector<uint64_t>{4}));
    EXPECT_EQ(s.home_of(4), 1);
    EXPECT_EQ(s.bytes_cached(0), 15);
    EXPECT_EQ(s.bytes_cached(1), 2);
    EXPECT_EQ(s.unused(1), 0);
    EXPECT_TRUE(s.remove(3));
    EXPECT_EQ(s.unused(1), 20);
    EXPECT_EQ(s.home_of(3), -1);
}

}  // namespace
}  // namespace di::runtime
