// Speculative decoding in the engine (EngineOptions::speculative, docs/speculative.md): every greedy request
// gets the tokens it gets without it, alone or in a batch with a sampled one, chunked prompts past the first
// HCA window and prompts restored from the prefix cache; a sampled one's tokens score as its prompt would. On
// random weights the MTP block's guesses are nearly always wrong, so a second model keeps only channel 0 of
// the final norms (the main model's and the MTP block's): both heads then pick one of the same two tokens
// (the largest or the smallest of the head's column 0, by the sign of that channel), and about half of the
// guesses are right, so the kept path runs too.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "deepinfer/engine.h"
#include "demo/demo_model.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace di {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kVocab = 512;

// A random model with the MTP block in `dir`; two_tokens: its final norms keep channel 0 only.
std::string write_model(const std::string& name, bool two_tokens) {
    const fs::path dir =
        fs::temp_directory_path() / ("deepinfer-spec-" + name + "-" + std::to_string(::getpid()));
    demo::RandomModelSpec spec;
    spec.vocab = kVocab;
    spec.mtp = true;
    EXPECT_TRUE(demo::write_random_model(dir.string(), spec).ok());
    if (!two_tokens) return dir.string();
    auto ck = io::Checkpoint::open(dir.string());
    EXPECT_TRUE(ck.ok());
    std::vector<io::TensorToWrite> out;
    for (const auto& [n, e] : ck->tensors()) {
        io::TensorToWrite t{n, e.st_dtype, e.shape, std::vector<uint8_t>(e.data, e.data + e.nbytes)};
        if (n == "norm.weight" || n == "mtp.0.norm.weight") {  // bf16: 1.0 in channel 0, zeros elsewhere
            std::fill(t.bytes.begin(), t.bytes.end(), uint8_t(0));
            t.bytes[0] = 0x80, t.bytes[1] = 0x3F;
        }
        out.push_back(std::move(t));
    }
    ck = Result<io::Checkpoint>(make_error(ErrorCode::kIo, "closed"));  // unmap before rewriting
    EXPECT_TRUE(io::write_safetensors((dir / "model.safetensors").string(), out).ok());
    return dir.string();
}

struct Got {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<float>> prompt_logprobs;
    EngineStats stats;
};

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n) {
    std::vector<int32_t> t(n);
    for (int32_t& x : t) x = int32_t(rng() % uint32_t(kVocab));
    return t;
}

// The requests: greedy ones (one prompt twice, for the prefix cache; one past the first HCA window of 128;
// one with max_tokens 2, no room for a draft's second token), one sampled at temperature 0.8, one greedy with
// a repetition penalty and its stop ids held back, and one asking for its prompt's logprobs.
constexpr size_t kSampled = 5;  // requests()'s sampled one

std::vector<Request> requests() {
    std::mt19937 rng(5);
    const std::vector<int32_t> shared = random_tokens(rng, 40);
    std::vector<Request> rs;
    for (const auto& [prompt, max_tokens] :
         std::vector<std::pair<std::vector<int32_t>, int64_t>>{{shared, 30},
                                                               {random_tokens(rng, 9), 40},
                                                               {random_tokens(rng, 150), 24},
                                                               {shared, 30},
                                                               {random_tokens(rng, 3), 2}}) {
        Request r;
        r.prompt = prompt;
        r.sampling.temperature = 0;
        r.stop.max_tokens = max_tokens;
        r.stop.ignore_eos = true;
        rs.push_back(r);
    }
    Request s = rs[1];  // kSampled
    s.sampling.temperature = 0.8f;
    s.sampling.seed = 99;
    rs.push_back(s);
    Request held = rs[1];  // greedy with its stop ids held back at first: drafts verified by whole-row draws
    held.prompt = random_tokens(rng, 12);
    held.stop.ignore_eos = false;
    held.stop.min_tokens = 12;
    held.stop.max_tokens = 30;
    held.sampling.repetition_penalty = 1.3f;
    rs.push_back(held);
    Request scored = rs[1];  // its prefill steps bring every row to the host beside the others' drafts
    scored.prompt = random_tokens(rng, 100);
    scored.prompt_logprobs = 2;
    rs.push_back(scored);
    return rs;
}

// candidates: EngineOptions::sample_candidates (0: sampled rows cross whole; 256: what a GPU does).
Got run(const std::string& dir, const std::string& speculative, bool together, int candidates,
        int ranks = 1) {
    EngineOptions o;
    o.model_dir = dir;
    o.backend = "cpu";
    o.prefill_chunk = 16;
    o.step_token_budget = 64;
    o.max_running = 8;
    o.speculative = speculative;
    o.sample_candidates = candidates;
    o.expert_ranks = ranks;
    auto e = Engine::create(o);
    EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
    Got g;
    if (!e.ok()) return g;
    const std::vector<Request> rs = requests();
    std::vector<std::shared_ptr<RequestStream>> streams;
    g.tokens.resize(rs.size());
    g.prompt_logprobs.resize(rs.size());
    auto collect = [&](RequestStream& s, size_t i) {
        for (;;) {
            auto ev = s.next(std::chrono::milliseconds(60000));
            if (!ev) return ADD_FAILURE() << "request " << s.id() << " produced nothing for 60 s";
            for (const GeneratedToken& t : ev->tokens) g.tokens[i].push_back(t.id);
            for (const GeneratedToken& t : ev->prompt_logprobs) g.prompt_logprobs[i].push_back(t.logprob);
            if (ev->finished) return;
        }
    };
    for (size_t i = 0; i < rs.size(); ++i) {
        auto s = (*e)->submit(rs[i]);
        EXPECT_TRUE(s.ok());
        if (!s.ok()) return g;
        if (together)
            streams.push_back(*s);
        else
            collect(**s, i);
    }
    for (size_t i = 0; i < streams.size(); ++i) collect(*streams[i], i);
    for (int i = 0; i < 500 && ((*e)->stats().n_running > 0 || (*e)->stats().state_bytes_allocated > 0); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the last step's counts
    g.stats = (*e)->stats();
    return g;
}

TEST(Engine, SpeculativeGivesTheTokensOfNone) {
    for (const bool two_tokens : {false, true}) {
        SCOPED_TRACE(two_tokens ? "two-token heads" : "random heads");
        const std::string dir = write_model(two_tokens ? "two" : "random", two_tokens);
        for (const auto& [together, candidates] :
             {std::pair{false, 0}, std::pair{true, 0}, std::pair{true, 256}}) {
            SCOPED_TRACE(fmt::format("{}, {} candidates", together ? "together" : "one by one", candidates));
            const Got off = run(dir, "off", together, candidates), on = run(dir, "mtp", together, candidates);
            ASSERT_EQ(off.tokens.size(), on.tokens.size());
            for (size_t i = 0; i < off.tokens.size(); ++i) {
                // the sampled request draws differently with drafts (SpeculativeDrawsScoreAsTheirPrompt)
                if (i == kSampled) {
                    EXPECT_EQ(on.tokens[i].size(), off.tokens[i].size());
                    continue;
                }
                EXPECT_EQ(on.tokens[i], off.tokens[i]) << "request " << i;
                EXPECT_EQ(on.prompt_logprobs[i], off.prompt_logprobs[i]) << "request " << i;
            }
            EXPECT_EQ(off.prompt_logprobs.back().size(), 99u);
            EXPECT_EQ(off.stats.draft_tokens, 0u);
            EXPECT_GT(on.stats.draft_tokens, 20u);
            EXPECT_EQ(on.stats.generation_tokens, off.stats.generation_tokens);
            if (!together) {  // together, how the requests batch depends on when each arrives
                EXPECT_LE(on.stats.steps, off.stats.steps);
            }
            if (!two_tokens && !together) {  // guesses all wrong: after five, only every 8th is verified
                EXPECT_LT(on.stats.draft_tokens * 3, on.stats.steps) << on.stats.draft_tokens;
            }
            if (two_tokens) {  // both paths ran; one by one, each kept draft saved a step
                EXPECT_GT(on.stats.draft_tokens_accepted, 10u);
                EXPECT_LT(on.stats.draft_tokens_accepted, on.stats.draft_tokens);
                if (!together) {
                    EXPECT_EQ(on.stats.steps + on.stats.draft_tokens_accepted, off.stats.steps);
                }
            }
        }
        fs::remove_all(dir);
    }
}

// A drawing request's drafts (Sampler::sample_draft keeps the distribution: tests/runtime/sampler_test.cpp)
// change which tokens its seed draws, not how its rows are computed: each token's logprob, reported from the
// row that drew it, equals the logprob of that token when the tokens are scored as a prompt without
// drafts; the same seed gives the same tokens twice.
TEST(Engine, SpeculativeDrawsScoreAsTheirPrompt) {
    const std::string dir = write_model("draws", true);
    EngineOptions o;
    o.model_dir = dir;
    o.backend = "cpu";
    o.prefill_chunk = 16;
    o.speculative = "mtp";
    auto e = Engine::create(o);
    ASSERT_TRUE(e.ok()) << e.error().message;
    std::mt19937 rng(3);
    Request r;
    r.prompt = random_tokens(rng, 9);
    r.sampling.temperature = 0.3f;
    r.sampling.top_k = 3;
    r.sampling.seed = 7;
    r.sampling.logprobs = true;
    r.stop.max_tokens = 60;
    r.stop.ignore_eos = true;
    auto drawn = [&](const Request& q) {
        std::vector<GeneratedToken> out;
        auto s = (*e)->submit(q);
        EXPECT_TRUE(s.ok());
        for (;;) {
            auto ev = (*s)->next(std::chrono::milliseconds(60000));
            if (!ev) return ADD_FAILURE() << "nothing for 60 s", out;
            out.insert(out.end(), ev->tokens.begin(), ev->tokens.end());
            out.insert(out.end(), ev->prompt_logprobs.begin(), ev->prompt_logprobs.end());
            if (ev->finished) return out;
        }
    };
    const std::vector<GeneratedToken> first = drawn(r), again = drawn(r);
    ASSERT_EQ(first.size(), 60u);
    ASSERT_EQ(again.size(), 60u);
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].id, again[i].id) << i;
    for (int i = 0; i < 500 && (*e)->stats().n_running > 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const EngineStats st = (*e)->stats();
    EXPECT_GT(st.draft_tokens_accepted, 4u);
    EXPECT_LT(st.draft_tokens_accepted, st.draft_tokens);
    Request scored;
    scored.prompt = r.prompt;
    for (const GeneratedToken& t : first) scored.prompt.push_back(t.id);
    scored.prompt_logprobs = 0;
    scored.stop.max_tokens = 0;
    const std::vector<GeneratedToken> rows = drawn(scored);  // the prompt's tokens from the second on
    ASSERT_EQ(rows.size(), scored.prompt.size() - 1);
    for (size_t i = 0; i < first.size(); ++i) {
        const GeneratedToken& want = rows[r.prompt.size() - 1 + i];
        EXPECT_EQ(want.id, first[i].id);
        EXPECT_NEAR(first[i].logprob, want.logprob, 1e-4) << "token " << i;
    }
    fs::remove_all(dir);
}

// Two expert-parallel ranks (docs/parallel.md): each drafts for its own sequences, the drafter's MoE
// exchanging tokens between them; greedy requests get one rank's tokens without drafts.
TEST(Engine, SpeculativeOnExpertRanks) {
    const std::string dir = write_model("ranks", true);
    const Got off = run(dir, "off", true, 0), on = run(dir, "mtp", true, 0, 2);
    ASSERT_EQ(off.tokens.size(), on.tokens.size());
    for (size_t i = 0; i < off.tokens.size(); ++i) {
        if (i != kSampled) {
            EXPECT_EQ(on.tokens[i], off.tokens[i]) << "request " << i;
        }
    }
    EXPECT_GT(on.stats.draft_tokens_accepted, 10u);
    EXPECT_LT(on.stats.draft_tokens_accepted, on.stats.draft_tokens);
    fs::remove_all(dir);
}

TEST(Engine, SpeculativeNeedsTheMtpBlock) {
    EngineOptions o;
    o.model_dir = std::string(DI_TEST_DATA) + "/v4_tiny_fp32";  // transformers' layout: no mtp.* tensors
    o.backend = "cpu";
    o.speculative = "mtp";
    auto e = Engine::create(o);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("MTP"), std::string::npos) << e.error().message;
    o.speculative = "eagle";
    auto bad = Engine::create(o);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("speculative 'eagle'"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace di
