// The prefix cache on the GPU (state copies on the device, CUDA graphs on): requests that start from kept
// states give the tokens and logprobs of an engine without the cache, bit for bit, in exact and native
// precision, on the FP8 fixture. One request at a time, so both engines run the same steps apart from the
// chunks the cache skips. And prompt logprobs (every prefill row's logits) on the GPU against the
// log-softmax of transformers' fp32 logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "deepinfer/engine.h"
#include "io/npy.h"

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

TEST(CudaPrefixCache, PromptLogprobsEqualTransformersLogSoftmax) {
    const char* env = std::getenv("DEEPINFER_TEST_DATA");
    const std::string dir = std::string(env ? env : DI_TEST_DATA) + "/v4_tiny_fp8";
    std::ifstream f(dir + "/prompt.txt");
    std::vector<int32_t> prompt;
    for (int32_t t; f >> t;) prompt.push_back(t);
    auto npy = io::read_npy(dir + "/logits.npy");
    ASSERT_TRUE(npy.ok());
    const size_t V = 256;
    ASSERT_EQ(npy->f32.size(), prompt.size() * V);
    EngineOptions o;
    o.model_dir = dir;
    o.backend = "cuda";
    o.prefill_chunk = 16;
    o.state_memory_bytes = int64_t(1) << 30;
    auto engine = Engine::create(o);
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    Request r;
    r.prompt = prompt;
    r.stop.max_tokens = 0;
    r.prompt_logprobs = 1;
    auto s = (*engine)->submit(r);
    ASSERT_TRUE(s.ok());
    std::vector<GeneratedToken> got;
    for (;;) {
        auto e = (*s)->next(std::chrono::milliseconds(60000));
        ASSERT_TRUE(e);
        got.insert(got.end(), e->prompt_logprobs.begin(), e->prompt_logprobs.end());
        if (e->finished) break;
    }
    ASSERT_EQ(got.size(), prompt.size() - 1);
    double worst = 0;
    for (size_t q = 1; q < prompt.size(); ++q) {
        const float* row = npy->f32.data() + (q - 1) * V;
        double m = row[0], sum = 0;
        for (size_t v = 0; v < V; ++v) m = std::max(m, double(row[v]));
        for (size_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - m);
        worst = std::max(
            worst, std::fabs(double(got[q - 1].logprob) - (double(row[prompt[q]]) - m - std::log(sum))));
    }
    EXPECT_LT(worst, 1e-3);
}

}  // namespace
}  // namespace di
