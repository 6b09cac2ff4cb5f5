// Sampling from candidates computed on the GPU (EngineOptions::sample_candidates with the cuda backend's
// top_candidates) against sampling from whole rows copied to the host: 24 concurrent sampled requests on the
// FP8 fixture give the same tokens, and logprobs equal within 1e-6 (the GPU's sums run in another order than
// the host's).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "deepinfer/engine.h"
#include "ops/cuda/cuda_backend.h"

namespace di {
namespace {

std::vector<std::vector<GeneratedToken>> run(int candidates) {
    const char* env =
        std::getenv("DEEPINFER_TEST_DATA");  // the GPU machine runs a copy of the tree elsewhere
    EngineOptions o;
    o.model_dir = std::string(env ? env : DI_TEST_DATA) + "/v4_tiny_fp8";
    o.backend = "cuda";
    o.prefill_chunk = 8;
    o.step_token_budget = 64;
    o.max_running = 32;
    o.state_memory_bytes = int64_t(1) << 30;
    o.sample_candidates = candidates;
    auto engine = Engine::create(o);
    EXPECT_TRUE(engine.ok()) << (engine.ok() ? "" : engine.error().message);
    std::vector<std::vector<GeneratedToken>> out;
    if (!engine.ok()) return out;
    std::mt19937 rng(11);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 24; ++i) {
        Request r;
        r.prompt.resize(3 + rng() % 20);
        for (auto& t : r.prompt) t = int32_t(2 + rng() % 254);
        r.sampling.temperature = std::array{0.4f, 0.9f, 1.3f}[size_t(i % 3)];
        r.sampling.top_k = std::array{0, 5, 50}[size_t(i % 3)];
        r.sampling.top_p = i % 5 == 0 ? 0.8f : 1.0f;
        r.sampling.min_p = i % 7 == 0 ? 0.05f : 0.0f;
        r.sampling.logprobs = true;
        r.sampling.seed = 900 + uint64_t(i);
        r.stop.max_tokens = 8;
        r.stop.ignore_eos = true;
        auto s = (*engine)->submit(r);
        EXPECT_TRUE(s.ok());
        if (s.ok()) streams.push_back(*s);
    }
    for (auto& s : streams) {
        std::vector<GeneratedToken> toks;
        for (;;) {
            auto e = s->next(std::chrono::milliseconds(60000));
            if (!e) break;
            toks.insert(toks.end(), e->tokens.begin(), e->tokens.end());
            if (e->finished) break;
        }
        out.push_back(toks);
    }
    const EngineStats st = (*engine)->stats();
    if (candidates > 0) EXPECT_GT(st.candidate_draws, 0u) << "no draw came from the candidates";
    return out;
}

TEST(CudaEngineCandidates, SameTokensAsWholeRows) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const auto want = run(0);
    for (const int c : {4, 256}) {
        const auto got = run(c);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_EQ(got[i].size(), want[i].size()) << c << " candidates, request " << i;
            for (size_t t = 0; t < want[i].size(); ++t) {
                EXPECT_EQ(got[i][t].id, want[i][t].id) << c << " candidates, request " << i << " token " << t;
                EXPECT_NEAR(got[i][t].logprob, want[i][t].logprob, 1e-6f)
                    << "request " << i << " token " << t;
            }
        }
    }
}

}  // namespace
}  // namespace di
