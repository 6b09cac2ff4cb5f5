// The prefix cache on the GPU (state copies on the device, CUDA graphs on): requests that start from kept
// states give the tokens and logprobs of an engine without the cache, bit for bit, in exact and native
// precision, on the FP8 fixture. One request at a time, so both engines run the same steps apart from the
// chunks the cache skips.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>

#include "deepinfer/engine.h"

namespace di {
namespace {

struct Answer {
    std::vector<GeneratedToken> tokens;
    int64_t cached = -1;
};

std::vector<Answer> run(const std::vector<Request>& reqs, const std::string& precision, bool cache) {
    const char* env =
        std::getenv("DEEPINFER_TEST_DATA");  // the GPU machine runs a copy of the tree elsewhere
    EngineOptions o;
    o.model_dir = std::string(env ? env : DI_TEST_DATA) + "/v4_tiny_fp8";
    o.backend = "cuda";
    o.precision = precision;
    o.prefill_chunk = 8;
    o.step_token_budget = 64;
    o.state_memory_bytes = int64_t(1) << 30;
    o.prefix_cache = cache;
    auto engine = Engine::create(o);
    EXPECT_TRUE(engine.ok()) << (engine.ok() ? "" : engine.error().message);
    std::vector<Answer> out;
    if (!engine.ok()) return out;
    for (const Request& r : reqs) {
        auto s = (*engine)->submit(r);
        EXPECT_TRUE(s.ok());
        if (!s.ok()) continue;
        Answer a;
        for (;;) {
            auto e = (*s)->next(std::chrono::milliseconds(60000));
            if (!e) break;
            a.tokens.insert(a.tokens.end(), e->tokens.begin(), e->tokens.end());
            a.cached = e->cached_tokens;
            if (e->finished) break;
        }
        out.push_back(a);
    }
    return out;
}

TEST(CudaPrefixCache, GivesTheOutputsOfNoCache) {
    std::mt19937 rng(3);
    auto tokens = [&](size_t n) {
        std::vector<int32_t> v(n);
        for (auto& t : v) t = int32_t(2 + rng() % 254);
        return v;
    };
    const std::vector<int32_t> base = tokens(37);
    std::vector<int32_t> longer = base, shared(base.begin(), base.begin() + 20);
    for (int32_t t : tokens(13)) longer.push_back(t);
    for (int32_t t : tokens(30)) shared.push_back(t);
    const std::vector<std::vector<int32_t>> prompts = {base, base, longer, shared};
    const std::vector<int64_t> want_cached = {0, 32, 32, 16};
    std::vector<Request> reqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
        Request r;
        r.prompt = prompts[i];
        r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
        r.sampling.seed = 50 + uint64_t(i);
        r.sampling.logprobs = true;
        r.stop.max_tokens = 8;
        r.stop.ignore_eos = true;
        reqs.push_back(r);
    }
    for (const char* precision : {"exact", "native"}) {
        const std::vector<Answer> plain = run(reqs, precision, false), cached = run(reqs, precision, true);
        ASSERT_EQ(plain.size(), reqs.size());
        ASSERT_EQ(cached.size(), reqs.size());
        for (size_t i = 0; i < reqs.size(); ++i) {
            EXPECT_EQ(cached[i].cached, want_cached[i]) << precision << " request " << i;
            ASSERT_EQ(cached[i].tokens.size(), plain[i].tokens.size()) << precision << " request " << i;
            for (size_t t = 0; t < plain[i].tokens.size(); ++t) {
                EXPECT_EQ(cached[i].tokens[t].id, plain[i].tokens[t].id) << precision << " request " << i;
                EXPECT_EQ(cached[i].tokens[t].logprob, plain[i].tokens[t].logprob)
                    << precision << " request " << i << " token " << t;
            }
        }
    }
}

}  // namespace
}  // namespace di
