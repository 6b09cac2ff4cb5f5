// The engine on the tiny fp32 fixture (reference backend): greedy output equals transformers' greedy
// continuation (tests/data/v4_tiny_fp32/greedy.json), requests are batch invariant (alone == among 32
// concurrent ones), and admission, cancellation, timeouts and limits free every byte of state.
#include "deepinfer/engine.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <tuple>

#include "io/npy.h"

namespace di {
namespace {

const std::string kModel = std::string(DI_TEST_DATA) + "/v4_tiny_fp32";

struct Collected {
    std::vector<int32_t> tokens;
    std::vector<GeneratedToken> full;
    RequestEvent last;
};

Collected collect(RequestStream& s) {
    Collected c;
    for (;;) {
        auto e = s.next(std::chrono::milliseconds(60000));
        if (!e) {
            ADD_FAILURE() << "request " << s.id() << " produced nothing for 60 s";
            return c;
        }
        for (auto& t : e->tokens) {
            c.tokens.push_back(t.id);
            c.full.push_back(t);
        }
        if (e->finished) {
            c.last = std::move(*e);
            return c;
        }
    }
}

EngineOptions options(int64_t prefill_chunk = 8) {
    EngineOptions o;
    o.model_dir = kModel;
    o.prefill_chunk = prefill_chunk;
    o.step_token_budget = 64;
    o.max_running = 32;
    o.state_memory_bytes = int64_t(1) << 30;
    return o;
}

std::unique_ptr<Engine> make_engine(const EngineOptions& o) {
    auto e = Engine::create(o);
    EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
    return e.ok() ? std::move(*e) : nullptr;
}

Request greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
    Request r;
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0;
    r.stop.max_tokens = max_tokens;
    r.stop.ignore_eos = true;
    return r;
}

void wait_idle(Engine& e) {
    for (int i = 0; i < 200; ++i) {
        EngineStats s = e.stats();
        if (s.n_running == 0 && s.n_waiting == 0 && s.state_bytes_allocated == 0) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

TEST(Engine, GreedyMatchesTransformersWithChunkedPrefill) {
    std::ifstream f(kModel + "/greedy.json");
    const auto j = nlohmann::json::parse(f);
    const auto prompt = j["prompt"].get<std::vector<int32_t>>();
    const auto want = j["continuation"].get<std::vector<int32_t>>();
    auto engine = make_engine(options(8));  // 20-token prompt prefilled as 8 + 8 + 4
    ASSERT_TRUE(engine);
    const int64_t n = 32;
    auto s = engine->submit(greedy(prompt, n));
    ASSERT_TRUE(s.ok());
    Collected c = collect(**s);
    EXPECT_EQ(c.last.reason, FinishReason::kLength);
    EXPECT_EQ(c.last.prompt_tokens, int64_t(prompt.size()));
    EXPECT_EQ(c.last.completion_tokens, n);
    EXPECT_EQ(c.tokens, std::vector<int32_t>(want.begin(), want.begin() + n));
}

// min_tokens: a stop token cannot end the output before it (the greedy run's first token, made a stop
// token, ends a plain request at once and a min_tokens = 3 one only from its third token on).
TEST(Engine, MinTokensHoldsStopTokensBack) {
    std::ifstream f(kModel + "/greedy.json");
    const auto j = nlohmann::json::parse(f);
    const auto prompt = j["prompt"].get<std::vector<int32_t>>();
    const int32_t first = j["continuation"][0].get<int32_t>();
    auto engine = make_engine(options());
    ASSERT_TRUE(engine);
    Request r = greedy(prompt, 8);
    r.stop.stop_token_ids = {first};
    Collected plain = collect(**engine->submit(r));
    EXPECT_EQ(plain.tokens, std::vector<int32_t>{first});
    EXPECT_EQ(plain.last.reason, FinishReason::kStop);
    r.stop.min_tokens = 3;
    Collected held = collect(**engine->submit(r));
    ASSERT_GE(held.tokens.size(), 3u);
    EXPECT_NE(held.tokens[0], first);
    EXPECT_NE(held.tokens[1], first);
    r.stop.min_tokens = 9;  // more than max_tokens
    EXPECT_EQ(engine->submit(r).error().code, ErrorCode::kInvalidArgument);
}

// 32 requests with different prompts, greedy and seeded sampling: each alone, then all at once.
TEST(Engine, BatchInvariantAmong32ConcurrentRequests) {
    auto engine = make_engine(options(8));
    ASSERT_TRUE(engine);
    std::mt19937 rng(42);
    std::vector<Request> reqs;
    for (int i = 0; i < 32; ++i) {
        std::vector<int32_t> prompt(3 + rng() % 30);
        for (auto& t : prompt) t = int32_t(2 + rng() % 254);
        Request r = greedy(prompt, 4 + int64_t(rng() % 5));
        if (i % 2) {  // seeded sampling with every filter on
            r.sampling.temperature = 0.9f;
            r.sampling.top_p = 0.95f;
            r.sampling.top_k = 50;
            r.sampling.min_p = 0.01f;
            r.sampling.presence_penalty = 0.5f;
            r.sampling.seed = 1000 + uint64_t(i);
        }
        reqs.push_back(r);
    }
    std::vector<std::vector<int32_t>> alone;
    for (const Request& r : reqs) {
        auto s = engine->submit(r);
        ASSERT_TRUE(s.ok());
        alone.push_back(collect(**s).tokens);
    }
    const EngineStats before = engine->stats();
    // alone, the greedy requests' steps pick on the model's side; the sampled ones copy logits
    EXPECT_GT(before.greedy_steps, 0u);
    EXPECT_LT(before.greedy_steps, before.steps);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const Request& r : reqs) {
        auto s = engine->submit(r);
        ASSERT_TRUE(s.ok());
        streams.push_back(*s);
    }
    for (size_t i = 0; i < streams.size(); ++i) {
        Collected c = collect(*streams[i]);
        EXPECT_EQ(c.tokens, alone[i]) << "request " << i << " differs when batched";
        EXPECT_EQ(c.last.completion_tokens, reqs[i].stop.max_tokens);
    }
    wait_idle(*engine);
    EngineStats st = engine->stats();
    const double mean_batch =
        (st.batch_size.sum - before.batch_size.sum) / double(st.batch_size.count - before.batch_size.count);
    EXPECT_GT(mean_batch, 8.0) << "the concurrent run did not batch";
    EXPECT_EQ(st.state_bytes_allocated, 0);
    EXPECT_EQ(st.state_bytes_reserved, 0);
}

// Drawing from each row's candidates (EngineOptions::sample_candidates, what device backends do by default)
// gives every request the tokens, logprobs and alternatives of drawing from the whole row: 24 concurrent
// requests mixing temperatures, top-k, top-p, min-p, logprobs, penalties and min_tokens (those two with the
// logits of the ids they change), with prefill chunks and decodes in the same steps.
TEST(Engine, CandidatesGiveTheFullRowsDraws) {
    std::mt19937 rng(7);
    std::vector<Request> reqs;
    for (int i = 0; i < 24; ++i) {
        std::vector<int32_t> prompt(3 + rng() % 20);
        for (auto& t : prompt) t = int32_t(2 + rng() % 254);
        Request r = greedy(prompt, 6 + int64_t(rng() % 6));
        r.sampling.temperature = std::array{0.0f, 0.4f, 0.9f, 1.3f}[size_t(i % 4)];
        r.sampling.top_k = std::array{0, 5, 50}[size_t(i % 3)];
        r.sampling.top_p = i % 5 == 0 ? 0.8f : 1.0f;
        r.sampling.min_p = i % 7 == 0 ? 0.05f : 0.0f;
        r.sampling.logprobs = i % 2 == 0;
        r.sampling.top_logprobs = i % 4 == 0 ? 3 : 0;
        if (i % 6 == 5) r.sampling.frequency_penalty = 0.4f;
        if (i % 8 == 3) r.stop.min_tokens = 3, r.stop.ignore_eos = false;
        r.sampling.seed = 500 + uint64_t(i);
        reqs.push_back(r);
    }
    auto run = [&](int candidates, EngineStats* st, int ranks = 1) {
        EngineOptions o = options(8);
        o.sample_candidates = candidates;
        o.expert_ranks = ranks;
        auto engine = make_engine(o);
        std::vector<Collected> out;
        if (!engine) return out;
        std::vector<std::shared_ptr<RequestStream>> streams;
        for (const Request& r : reqs) {
            auto s = engine->submit(r);
            EXPECT_TRUE(s.ok());
            if (s.ok()) streams.push_back(*s);
        }
        for (auto& s : streams) out.push_back(collect(*s));
        *st = engine->stats();
        return out;
    };
    EngineStats none, few, all, ranks;
    const std::vector<Collected> want = run(0, &none);
    EXPECT_EQ(none.candidate_draws, 0u);
    // 4 candidates a row: most draws read past them and take the whole row; 256, the tiny vocabulary: none;
    // and 4 with two expert-parallel ranks (each sequence's rows on its home rank)
    for (auto [n, st, r] : {std::tuple{4, &few, 1}, std::tuple{256, &all, 1}, std::tuple{4, &ranks, 2}}) {
        const std::vector<Collected> got = run(n, st, r);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) {
            EXPECT_EQ(got[i].tokens, want[i].tokens) << n << " candidates, " << r << " ranks, request " << i;
            ASSERT_EQ(got[i].full.size(), want[i].full.size());
            for (size_t t = 0; t < want[i].full.size(); ++t) {
                EXPECT_EQ(got[i].full[t].logprob, want[i].full[t].logprob)
                    << "request " << i << " token " << t;
                EXPECT_EQ(got[i].full[t].top, want[i].full[t].top) << "request " << i << " token " << t;
            }
        }
    }
    EXPECT_GT(few.candidate_draws, 0u);
    EXPECT_GT(few.full_row_draws, all.full_row_draws);
    EXPECT_EQ(all.full_row_draws, 0u);  // the whole vocabulary is the candidates
    EXPECT_EQ(ranks.candidate_draws, few.candidate_draws);
    std::printf("candidate / full-row draws: 4 a row %llu / %llu, 256 a row %llu / %llu\n",
                (unsigned long long)few.candidate_draws, (unsigned long long)few.full_row_draws,
                (unsigned long long)all.candidate_draws, (unsigned long long)all.full_row_draws);
}

TEST(Engine, CandidatesOutOfRangeAreAnError) {
    for (const int n : {-2, kMaxSampleCandidates + 1}) {
        EngineOptions o = options(8);
        o.sample_candidates = n;
        auto e = Engine::create(o);
        ASSERT_FALSE(e.ok()) << n;
        EXPECT_NE(e.error().message.find("sample_candidates " + std::to_string(n)), std::string::npos)
            << e.error().message;
    }
}

TEST(Engine, CancelFreesTheState) {
    auto engine = make_engine(options());
    ASSERT_TRUE(engine);
    auto s = engine->submit(greedy({5, 6, 7}, 10000));
    ASSERT_TRUE(s.ok());
    auto first = (*s)->next(std::chrono::milliseconds(30000));
    ASSERT_TRUE(first);
    for (int i = 0; i < 100 && engine->stats().state_bytes_allocated == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EngineStats held = engine->stats();
    EXPECT_GT(held.state_bytes_allocated, 0);
    // Exact accounting: the reservation exceeds the allocation only by the unfilled tail of each compressed
    // layer's last entry (< one entry of head_dim + index_dim floats per layer).
    EXPECT_EQ(held.state_bytes_reserved, engine->state_bytes_for(3 + 10000));
    EXPECT_GE(held.state_bytes_reserved, held.state_bytes_allocated);
    EXPECT_LT(held.state_bytes_reserved - held.state_bytes_allocated, 6 * (128 + 64) * 4);
    (*s)->cancel();
    Collected c = collect(**s);
    EXPECT_EQ(c.last.reason, FinishReason::kCancelled);
    wait_idle(*engine);
    EngineStats st = engine->stats();
    EXPECT_EQ(st.state_bytes_allocated, 0);
    EXPECT_EQ(st.state_bytes_reserved, 0);
    EXPECT_EQ(st.finished_cancelled, 1u);
}

TEST(Engine, AdmissionWaitsForMemoryAndRefusesWhatNeverFits) {
    EngineOptions o = options();
    auto probe = make_engine(o);
    ASSERT_TRUE(probe);
    const int64_t one = probe->state_bytes_for(4 + 8);
    probe.reset();
    o.state_memory_bytes = 2 * one;  // two requests of capacity 12 fit at once
    o.max_waiting = 3;
    o.max_context = 1 << 30;
    auto engine = make_engine(o);
    ASSERT_TRUE(engine);
    // The smallest max_tokens whose state exceeds the whole budget.
    const ModelInfo& mi = engine->info();
    const int64_t huge =
        int64_t(double(o.state_memory_bytes - mi.state_fixed_bytes) / mi.state_bytes_per_token) + 64;
    ASSERT_GT(engine->state_bytes_for(4 + huge), o.state_memory_bytes);
    auto never = engine->submit(greedy({1, 2, 3, 4}, huge));
    ASSERT_FALSE(never.ok());
    EXPECT_EQ(never.error().code, ErrorCode::kOutOfRange);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 5; ++i) {
        auto s = engine->submit(greedy({int32_t(10 + i), 2, 3, 4}, 8));
        if (!s.ok()) {
            EXPECT_EQ(s.error().code, ErrorCode::kCapacity);
            continue;
        }
        streams.push_back(*s);
    }
    EXPECT_GE(streams.size(), 3u);
    int max_running = 0;
    for (auto& s : streams) {
        max_running = std::max(max_running, engine->stats().n_running);
        EXPECT_EQ(collect(*s).last.reason, FinishReason::kLength);
    }
    EXPECT_LE(max_running, 2);
    wait_idle(*engine);
    EXPECT_EQ(engine->stats().state_bytes_reserved, 0);
}

TEST(Engine, TimeoutEndsARequest) {
    auto engine = make_engine(options());
    ASSERT_TRUE(engine);
    Request r = greedy({5, 6, 7}, 16000);
    r.timeout = std::chrono::milliseconds(200);
    auto s = engine->submit(r);
    ASSERT_TRUE(s.ok());
    Collected c = collect(**s);
    EXPECT_EQ(c.last.reason, FinishReason::kTimeout);
    wait_idle(*engine);
    EXPECT_EQ(engine->stats().state_bytes_allocated, 0);
}

TEST(Engine, RejectsBadRequests) {
    EngineOptions o = options();
    o.max_context = 64;
    auto engine = make_engine(o);
    ASSERT_TRUE(engine);
    EXPECT_EQ(engine->submit(greedy({}, 4)).error().code, ErrorCode::kInvalidArgument);
    auto outside = engine->submit(greedy({5, 300}, 4));  // a bad field, not a context limit
    ASSERT_FALSE(outside.ok());
    EXPECT_EQ(outside.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(outside.error().message.rfind("prompt: token id 300 at index 1", 0), 0u)
        << outside.error().message;
    Request bad_stop = greedy({5}, 4);
    bad_stop.stop.stop_token_ids = {3, 256};
    auto stop_outside = engine->submit(bad_stop);
    ASSERT_FALSE(stop_outside.ok());
    EXPECT_EQ(stop_outside.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(stop_outside.error().message.rfind("stop_token_ids: token id 256", 0), 0u)
        << stop_outside.error().message;
    EXPECT_EQ(engine->submit(greedy({5}, 0)).error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(engine->submit(greedy(std::vector<int32_t>(60, 5), 5)).error().code, ErrorCode::kOutOfRange);
    Request stop_str = greedy({5}, 4);
    stop_str.stop.stop = {"x"};  // the fixture has no tokenizer
    EXPECT_EQ(engine->submit(stop_str).error().code, ErrorCode::kUnsupported);
    // prompt + max_tokens used to overflow past the context check and abort in the scheduler
    for (int64_t huge : {INT64_MAX, INT64_MAX - 2, int64_t(1) << 62}) {
        auto r = engine->submit(greedy({1, 2, 3}, huge));
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.error().code, ErrorCode::kOutOfRange);
        EXPECT_NE(r.error().message.find("exceeds the context limit of 64 tokens"), std::string::npos);
    }
    EXPECT_EQ(engine->state_bytes_for(INT64_MAX), INT64_MAX);  // saturates instead of overflowing
    EXPECT_EQ(engine->stats().n_waiting + engine->stats().n_running, 0);
}

TEST(Engine, ShutdownEndsRunningAndQueuedRequestsAndRefusesNewOnes) {
    EngineOptions o = options();
    o.max_running = 1;  // the second request waits in the queue
    auto engine = make_engine(o);
    ASSERT_TRUE(engine);
    auto a = engine->submit(greedy({1, 2, 3}, 200));
    auto b = engine->submit(greedy({4, 5, 6}, 200));
    ASSERT_TRUE(a.ok() && b.ok());
    engine->shutdown();
    for (auto* s : {&*a, &*b}) {
        const Collected c = collect(**s);
        EXPECT_EQ(c.last.reason, FinishReason::kCancelled);
        EXPECT_EQ(c.last.error, "the engine shut down");
    }
    auto late = engine->submit(greedy({1}, 2));
    ASSERT_FALSE(late.ok());
    EXPECT_EQ(late.error().code, ErrorCode::kUnsupported);
    engine->shutdown();  // idempotent
}

TEST(Engine, StopTokenAndLogprobs) {
    auto engine = make_engine(options());
    ASSERT_TRUE(engine);
    std::ifstream f(kModel + "/greedy.json");
    const auto j = nlohmann::json::parse(f);
    const auto prompt = j["prompt"].get<std::vector<int32_t>>();
    const auto want = j["continuation"].get<std::vector<int32_t>>();
    Request r = greedy(prompt, 20);
    r.stop.stop_token_ids = {want[4]};
    r.sampling.logprobs = true;
    r.sampling.top_logprobs = 3;
    auto s = engine->submit(r);
    ASSERT_TRUE(s.ok());
    Collected c = collect(**s);
    const auto first = std::find(want.begin(), want.end(), want[4]) - want.begin();
    EXPECT_EQ(c.last.reason, FinishReason::kStop);
    EXPECT_EQ(c.last.completion_tokens, first + 1);
    for (const auto& t : c.full) {
        ASSERT_EQ(t.top.size(), 3u);
        EXPECT_EQ(t.top[0].first, t.id);  // greedy: the chosen token is the most likely
        EXPECT_FLOAT_EQ(t.top[0].second, t.logprob);
        EXPECT_LE(t.logprob, 0.0f);
        EXPECT_GE(t.top[0].second, t.top[1].second);
    }
}

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n) {
    std::vector<int32_t> v(n);
    for (auto& t : v) t = int32_t(2 + rng() % 254);
    return v;
}

std::vector<int32_t> joined(std::vector<int32_t> a, std::span<const int32_t> b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// Each request alone, one after another, on an engine without the prefix cache (chunks of 8): the outputs
// the cache must reproduce.
std::vector<Collected> each_without_cache(const std::vector<Request>& reqs) {
    EngineOptions o = options(8);
    o.prefix_cache = false;
    auto plain = make_engine(o);
    std::vector<Collected> out;
    if (!plain) return out;
    for (const Request& r : reqs) out.push_back(collect(**plain->submit(r)));
    EXPECT_EQ(plain->stats().prefix_cache_entries, 0u);
    return out;
}

// The prefix cache (on by default) against the engine without it: requests whose prompts begin with an
// earlier prompt's kept states (the same prompt again, a longer one as a chat's next turn, one sharing only
// its first 20 tokens) start from them and give the same tokens and logprobs, bit for bit, greedy and seeded
// sampling, one after another, then all at once, then on two expert-parallel ranks.
TEST(Engine, PrefixCacheGivesTheOutputsOfNoCache) {
    std::mt19937 rng(11);
    const std::vector<int32_t> base = random_tokens(rng, 37);  // kept at 8, 16 and 32 (chunks of 8)
    const std::vector<std::vector<int32_t>> prompts = {
        base,
        base,                                  // restored at 32
        joined(base, random_tokens(rng, 13)),  // restored at 32, kept at 48
        joined(std::vector<int32_t>(base.begin(), base.begin() + 20), random_tokens(rng, 30)),  // at 16
        random_tokens(rng, 45),
    };
    const std::vector<int64_t> want_cached = {0, 32, 32, 16, 0};
    std::vector<Request> reqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
        Request r = greedy(prompts[i], 6);
        if (i % 2) {
            r.sampling.temperature = 0.8f;
            r.sampling.top_p = 0.9f;
            r.sampling.seed = 77 + i;
            r.sampling.logprobs = true;
            r.sampling.top_logprobs = 2;
        }
        reqs.push_back(r);
    }
    const std::vector<Collected> want = each_without_cache(reqs);
    ASSERT_EQ(want.size(), reqs.size());
    EngineOptions o = options(8);
    auto engine = make_engine(o);
    ASSERT_TRUE(engine);
    auto same = [](const Collected& got, const Collected& w, size_t i) {
        EXPECT_EQ(got.tokens, w.tokens) << "request " << i;
        ASSERT_EQ(got.full.size(), w.full.size());
        for (size_t t = 0; t < w.full.size(); ++t) {
            EXPECT_EQ(got.full[t].logprob, w.full[t].logprob) << "request " << i << " token " << t;
            EXPECT_EQ(got.full[t].top, w.full[t].top) << "request " << i << " token " << t;
        }
    };
    for (size_t i = 0; i < reqs.size(); ++i) {
        const Collected c = collect(**engine->submit(reqs[i]));
        same(c, want[i], i);
        EXPECT_EQ(c.last.cached_tokens, want_cached[i]) << "request " << i;
        EXPECT_EQ(want[i].last.cached_tokens, 0);
    }
    wait_idle(*engine);
    EngineStats st = engine->stats();
    EXPECT_EQ(st.prefix_cache_hits, 3u);
    EXPECT_EQ(st.prefix_cache_hit_tokens, 80u);
    EXPECT_GT(st.prefix_cache_entries, 5u);
    EXPECT_GT(st.prefix_cache_bytes, 0);
    EXPECT_EQ(st.state_bytes_allocated, 0);
    EXPECT_EQ(st.state_bytes_reserved, 0);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const Request& r : reqs) streams.push_back(*engine->submit(r));
    for (size_t i = 0; i < reqs.size(); ++i) same(collect(*streams[i]), want[i], i);
    // Two expert-parallel ranks, each holding its share of the sequences' states (a kept state restored into
    // a state on the other rank too): the same outputs.
    engine.reset();
    o.expert_ranks = 2;
    auto ep = make_engine(o);
    ASSERT_TRUE(ep);
    for (int round = 0; round < 2; ++round) {
        streams.clear();
        for (const Request& r : reqs) streams.push_back(*ep->submit(r));
        for (size_t i = 0; i < reqs.size(); ++i) same(collect(*streams[i]), want[i], i);
    }
    EXPECT_GE(ep->stats().prefix_cache_hits, reqs.size());
}

// Requests that arrive together with one long shared beginning (a system prompt; n choices of one prompt):
// the first prefills it, the others wait until it has kept the state at the shared part's last kept boundary
// and start from that, with the outputs of an engine without the cache.
TEST(Engine, PrefixCacheSharesABeginningPrefilledAtOnce) {
    std::mt19937 rng(23);
    const std::vector<int32_t> base = random_tokens(rng, 36);
    std::vector<Request> reqs;
    for (int i = 0; i < 6; ++i) reqs.push_back(greedy(joined(base, random_tokens(rng, 4)), 5));
    reqs.push_back(greedy(random_tokens(rng, 40), 5));  // shares nothing: never waits
    const std::vector<Collected> want = each_without_cache(reqs);
    ASSERT_EQ(want.size(), reqs.size());
    EngineOptions o = options(8);
    auto engine = make_engine(o);
    ASSERT_TRUE(engine);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const Request& r : reqs) streams.push_back(*engine->submit(r));
    for (size_t i = 0; i < reqs.size(); ++i) {
        const Collected c = collect(*streams[i]);
        EXPECT_EQ(c.tokens, want[i].tokens) << "request " << i;
        EXPECT_EQ(c.last.cached_tokens, i == 0 || i == 6 ? 0 : 32) << "request " << i;
    }
    wait_idle(*engine);
    const EngineStats st = engine->stats();
    EXPECT_EQ(st.prefix_cache_hits, 5u);
    EXPECT_EQ(st.state_bytes_reserved, 0);
}

// Prompt logprobs (what `echo` with logprobs returns, and what evaluation harnesses score prompts with):
// every prompt token's logprob from the second on equals the log-softmax of transformers' fp32 logits at the
// position before it (tests/data/v4_tiny_fp32/logits.npy), with max_tokens 0 (scoring only) and beside
// plain requests in the same steps, whose tokens stay those they give alone; a request that also generates
// takes its tokens from its last prompt row (transformers' greedy continuation).
TEST(Engine, PromptLogprobsEqualTransformersLogSoftmax) {
    std::ifstream f(kModel + "/prompt.txt");
    std::vector<int32_t> prompt;
    for (int32_t t; f >> t;) prompt.push_back(t);
    ASSERT_EQ(prompt.size(), 60u);
    auto npy = io::read_npy(kModel + "/logits.npy");
    ASSERT_TRUE(npy.ok());
    const int64_t V = 256;
    ASSERT_EQ(npy->f32.size(), 60u * size_t(V));
    std::ifstream g(kModel + "/greedy.json");
    const auto j = nlohmann::json::parse(g);
    const auto greedy_prompt = j["prompt"].get<std::vector<int32_t>>();
    const auto want_continuation = j["continuation"].get<std::vector<int32_t>>();

    auto engine = make_engine(options(8));
    ASSERT_TRUE(engine);
    std::mt19937 rng(3);
    std::vector<Request> plain;
    for (int i = 0; i < 3; ++i) plain.push_back(greedy(random_tokens(rng, 10 + size_t(i) * 7), 6));
    std::vector<std::vector<int32_t>> alone;
    for (const Request& r : plain) alone.push_back(collect(**engine->submit(r)).tokens);

    Request score = greedy(prompt, 0);
    score.prompt_logprobs = 3;
    Request gen = greedy(greedy_prompt, 4);
    gen.prompt_logprobs = 0;
    std::vector<std::shared_ptr<RequestStream>> streams;
    streams.push_back(*engine->submit(score));
    for (const Request& r : plain) streams.push_back(*engine->submit(r));
    streams.push_back(*engine->submit(gen));
    std::vector<GeneratedToken> got;
    Collected scored;
    for (;;) {
        auto e = streams[0]->next(std::chrono::milliseconds(60000));
        ASSERT_TRUE(e);
        got.insert(got.end(), e->prompt_logprobs.begin(), e->prompt_logprobs.end());
        EXPECT_TRUE(e->tokens.empty());
        if (e->finished) {
            scored.last = std::move(*e);
            break;
        }
    }
    EXPECT_EQ(scored.last.reason, FinishReason::kLength);
    EXPECT_EQ(scored.last.completion_tokens, 0);
    ASSERT_EQ(got.size(), prompt.size() - 1);
    double worst = 0;
    for (size_t q = 1; q < prompt.size(); ++q) {
        const float* row = npy->f32.data() + (q - 1) * size_t(V);
        double m = row[0], sum = 0;
        for (int64_t v = 0; v < V; ++v) m = std::max(m, double(row[v]));
        for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - m);
        const double lse = m + std::log(sum);
        const GeneratedToken& t = got[q - 1];
        EXPECT_EQ(t.id, prompt[q]);
        worst = std::max(worst, std::fabs(double(t.logprob) - (double(row[prompt[q]]) - lse)));
        ASSERT_EQ(t.top.size(), 3u);
        EXPECT_EQ(t.top[0].first, int32_t(std::max_element(row, row + V) - row)) << "position " << q;
        EXPECT_NEAR(t.top[0].second, double(*std::max_element(row, row + V)) - lse, 1e-3);
        int32_t rank = 1;  // transformers' rank of the prompt token
        for (int64_t v = 0; v < V; ++v)
            rank += row[v] > row[prompt[q]] || (row[v] == row[prompt[q]] && v < prompt[q]);
        EXPECT_EQ(t.rank, rank) << "position " << q;
    }
    EXPECT_LT(worst, 1e-3);
    for (size_t i = 0; i < plain.size(); ++i)
        EXPECT_EQ(collect(*streams[1 + i]).tokens, alone[i]) << "plain request " << i;
    const Collected generated = collect(*streams.back());
    EXPECT_EQ(generated.tokens,
              std::vector<int32_t>(want_continuation.begin(), want_continuation.begin() + 4));
    EXPECT_EQ(generated.last.completion_tokens, 4);
    wait_idle(*engine);
    EXPECT_EQ(engine->stats().state_bytes_reserved, 0);
    Request bad = greedy(prompt, 0);  // max_tokens 0 without prompt logprobs
    EXPECT_EQ(engine->submit(bad).error().code, ErrorCode::kInvalidArgument);
    bad.prompt_logprobs = 21;
    EXPECT_EQ(engine->submit(bad).error().code, ErrorCode::kInvalidArgument);
    // two expert-parallel ranks: the same logprobs, bit for bit
    EngineOptions o = options(8);
    o.expert_ranks = 2;
    auto ep = make_engine(o);
    ASSERT_TRUE(ep);
    std::vector<GeneratedToken> ranked;
    auto s = *ep->submit(score);
    for (;;) {
        auto e = s->next(std::chrono::milliseconds(60000));
        ASSERT_TRUE(e);
        ranked.insert(ranked.end(), e->prompt_logprobs.begin(), e->prompt_logprobs.end());
        if (e->finished) break;
    }
    ASSERT_EQ(ranked.size(), got.size());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(ranked[i].logprob, got[i].logprob) << i;
        EXPECT_EQ(ranked[i].top, got[i].top) << i;
    }
}

// Two expert-parallel ranks each hold their share of the state memory (a sequence's state lives on one): a
// request that fits the whole budget but not a rank's share is refused, naming the share, where one rank
// admits it; two requests of a share each complete with their outputs alone and free every byte.
TEST(Engine, ExpertRanksSplitTheStateMemory) {
    std::mt19937 rng(31);
    const Request fits = greedy(random_tokens(rng, 20), 6), fits2 = greedy(random_tokens(rng, 20), 6);
    const Request big = greedy(random_tokens(rng, 20), 30);
    EngineOptions o = options(8);
    o.prefix_cache = false;
    auto one = make_engine(o);
    ASSERT_TRUE(one);
    const int64_t share = one->state_bytes_for(26);
    ASSERT_LT(share, one->state_bytes_for(50));
    ASSERT_LE(one->state_bytes_for(50), 2 * share);
    const Collected want = collect(**one->submit(fits)), want2 = collect(**one->submit(fits2));
    one.reset();
    o.state_memory_bytes = 2 * share;
    auto single = make_engine(o);
    ASSERT_TRUE(single);
    EXPECT_TRUE(single->submit(big).ok());  // within the budget of one rank
    single.reset();
    o.expert_ranks = 2;
    auto ranks = make_engine(o);
    ASSERT_TRUE(ranks);
    const auto refused = ranks->submit(big);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().code, ErrorCode::kOutOfRange);
    EXPECT_NE(refused.error().message.find("one rank's share"), std::string::npos) << refused.error().message;
    auto a = *ranks->submit(fits), b = *ranks->submit(fits2);
    EXPECT_EQ(collect(*a).tokens, want.tokens);
    EXPECT_EQ(collect(*b).tokens, want2.tokens);
    wait_idle(*ranks);
    EXPECT_EQ(ranks->stats().state_bytes_reserved, 0);
}

// Kept states use only the state memory no request reserves and give it back to admission: with room for
// two requests, one request alone fills the rest with its kept states (older ones already giving way to
// newer), then two at once take it back; the reserved and cached bytes together never exceed the budget.
TEST(Engine, PrefixCacheGivesWayToAdmission) {
    EngineOptions o = options(8);
    {
        auto probe = make_engine(o);
        ASSERT_TRUE(probe);
        o.state_memory_bytes = 2 * probe->state_bytes_for(60 + 4);
    }
    auto engine = make_engine(o);
    ASSERT_TRUE(engine);
    std::atomic<bool> done{false};
    std::atomic<int64_t> worst{0};
    std::atomic<int> most_running{0};
    std::thread watch([&] {
        while (!done) {
            const EngineStats s = engine->stats();
            worst = std::max<int64_t>(worst, s.state_bytes_reserved + s.prefix_cache_bytes);
            most_running = std::max(most_running.load(), s.n_running);
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    });
    std::mt19937 rng(5);
    EXPECT_EQ(collect(**engine->submit(greedy(random_tokens(rng, 60), 4))).last.reason,
              FinishReason::kLength);
    wait_idle(*engine);
    const EngineStats filled = engine->stats();
    EXPECT_GT(filled.prefix_cache_bytes, o.state_memory_bytes / 4);
    auto a = *engine->submit(greedy(random_tokens(rng, 60), 4));
    auto b = *engine->submit(greedy(random_tokens(rng, 60), 4));
    EXPECT_EQ(collect(*a).last.reason, FinishReason::kLength);
    EXPECT_EQ(collect(*b).last.reason, FinishReason::kLength);
    done = true;
    watch.join();
    wait_idle(*engine);
    const EngineStats st = engine->stats();
    EXPECT_LE(worst.load(), o.state_memory_bytes);
    EXPECT_EQ(most_running.load(), 2);
    EXPECT_GT(st.prefix_cache_evictions, filled.prefix_cache_evictions);  // admission took some back
    EXPECT_LE(st.prefix_cache_bytes, o.state_memory_bytes);
    EXPECT_EQ(st.state_bytes_reserved, 0);
}

}  // namespace
}  // namespace di
