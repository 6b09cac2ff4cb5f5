// Expert parallelism on the CPU: ranks in threads, each holding only its block of the routed experts
// (loading by shard) and exchanging the MoE's tokens with the others, give the one-rank logits bit for bit
// on the golden fixtures (a prefill chunk, then single-token decode steps; here every rank steps the same
// prompt as its own sequence), and match transformers' logits at the goldens' 1e-3 as the one-rank forward
// does.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "io/safetensors.h"
#include "model/deepseek_v4.h"
#include "model/expert_partition.h"
#include "model/weights.h"
#include "model_fixture.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/ref/ref_backend.h"
#include "parallel/communicator.h"
#include "runtime/model_loader.h"

namespace di::model {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<ops::Backend> backend(bool ref) {
    return ref ? ops::make_ref_backend() : ops::make_cpu_backend(1);
}

// The logits of the fixture's prompt as rank `part.rank` of `comm` (nullptr: one rank, all experts).
std::vector<float> run_rank(const std::string& dir, const std::shared_ptr<io::Checkpoint>& ckpt,
                            const ModelConfig& cfg, const std::vector<int32_t>& prompt, bool ref,
                            parallel::Communicator* comm) {
    const ExpertPartition part{.rank = comm ? comm->rank() : 0, .size = comm ? comm->size() : 1};
    auto be = backend(ref);
    auto w = bind_weights(ckpt, cfg, *be, part);
    EXPECT_TRUE(w.ok()) << dir << ": " << (w.ok() ? "" : w.error().message);
    if (!w.ok()) return {};
    DeepseekV4 m(cfg, std::move(*w), *be);
    m.set_expert_parallel(comm, part);
    // a prefill chunk, then one token at a time: both the many-token and the decode paths of the MoE
    return test::run_chunked(m, prompt, {int64_t(prompt.size()) - 4, 1});
}

void expect_ranks_equal_one(const std::string& name, int ranks, bool ref) {
    const std::string dir = std::string(DI_TEST_DATA) + "/" + name;
    auto cfg = load_config(dir);
    ASSERT_TRUE(cfg.ok()) << cfg.error().message;
    auto ck = io::Checkpoint::open(dir);
    ASSERT_TRUE(ck.ok()) << ck.error().message;
    const auto ckpt = std::make_shared<io::Checkpoint>(std::move(ck.value()));
    const test::Fixture fx = test::load_fixture(name);  // for its prompt
    const std::vector<float> one = run_rank(dir, ckpt, *cfg, fx.prompt, ref, nullptr);
    ASSERT_FALSE(one.empty());

    auto comms = parallel::make_local_group(ranks, 120s);
    std::vector<std::vector<float>> got(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
        threads.emplace_back(
            [&, r] { got[size_t(r)] = run_rank(dir, ckpt, *cfg, fx.prompt, ref, comms[size_t(r)].get()); });
    for (auto& t : threads) t.join();
    for (int r = 0; r < ranks; ++r) {
        ASSERT_EQ(got[size_t(r)].size(), one.size()) << name << " rank " << r;
        EXPECT_EQ(0, std::memcmp(got[size_t(r)].data(), one.data(), one.size() * sizeof(float)))
            << name << ": rank " << r << " of " << ranks << " differs from one rank";
    }
    // and the one-rank run itself against transformers (the goldens' bound), so equality is not vacuous
    int64_t rows = 0, cols = 0;
    const std::vector<float> golden = test::read_logits(dir + "/logits.npy", &rows, &cols);
    ASSERT_EQ(int64_t(one.size()), rows * cols);
    float worst = 0;
    for (size_t i = 0; i < one.size(); ++i) worst = std::max(worst, std::fabs(one[i] - golden[i]));
    EXPECT_LE(worst / test::max_abs(golden), 1e-3) << name;
}

// The same through runtime::load_model's ExpertParallelModel (what the engine, `run` and `serve` use with
// --expert-ranks): each sequence on its home rank (three sequences on two ranks: homes 0, 1, 0 by the least
// state in use, then 1, 1, 0 as the engine's admission places them), steps where both ranks run sequences,
// where one rank has none (it still computes its experts for the other's tokens), and the greedy pick,
// against one rank stepping the same chunks.
TEST(ExpertParallel, LoadedModelEqualsOneRank) {
    const std::string dir = std::string(DI_TEST_DATA) + "/v4_tiny_fp8";
    const test::Fixture fx = test::load_fixture("v4_tiny_fp8");
    auto be1 = ops::make_cpu_backend(1), be2 = ops::make_cpu_backend(1);
    auto one = runtime::load_model(dir, *be1);
    ASSERT_TRUE(one.ok()) << one.error().message;
    auto ranks = runtime::load_model(dir, *be2, false, 2);
    ASSERT_TRUE(ranks.ok()) << ranks.error().message;
    // a sequence's state lives on its home rank only
    EXPECT_EQ((*ranks)->state_size().fixed_bytes, (*one)->state_size().fixed_bytes);
    EXPECT_EQ((*one)->state_homes(), 1);
    EXPECT_EQ((*ranks)->state_homes(), 2);
    const std::vector<int32_t>& t = fx.prompt;
    ASSERT_GE(t.size(), 24u);
    auto run = [&](Model& m, std::vector<int32_t>& picks, bool placed) {
        auto make = [&](int home) {
            return placed ? m.new_state_on(64, home % m.state_homes()) : m.new_state(64);
        };
        auto a = make(1), b = make(1), c = make(0);
        std::vector<float> out;
        auto step = [&](std::initializer_list<SeqChunk> chunks) {
            const std::vector<SeqChunk> v(chunks);
            const std::vector<float> l = m.forward(v);
            out.insert(out.end(), l.begin(), l.end());
        };
        step({{a.get(), std::span(t).first(9), true},  // every rank runs its sequences
              {b.get(), std::span(t).subspan(3, 4), false},
              {c.get(), std::span(t).subspan(12, 6), false}});
        for (int i = 0; i < 2; ++i)
            step({{a.get(), std::span(t).subspan(9 + i, 1), false},
                  {b.get(), std::span(t).subspan(7 + i, 1), true},
                  {c.get(), std::span(t).subspan(18 + i, 1), false}});
        step({{c.get(), std::span(t).subspan(20, 2), true}, {a.get(), std::span(t).subspan(11, 1), false}});
        step({{b.get(), std::span(t).subspan(9, 3), true}});  // rank 0 has none of this step's sequences
        const std::vector<SeqChunk> last = {{a.get(), std::span(t).subspan(12, 1), false},
                                            {b.get(), std::span(t).subspan(12, 1), false},
                                            {c.get(), std::span(t).subspan(22, 1), false}};
        picks = m.forward_greedy(last).ids;
        EXPECT_EQ(a->n_tokens(), 13);
        EXPECT_EQ(b->n_tokens(), 10);
        EXPECT_EQ(c->n_tokens(), 11);
        return out;
    };
    std::vector<int32_t> want_picks, got_picks;
    const std::vector<float> want = run(**one, want_picks, false);
    for (const bool placed : {false, true}) {
        const std::vector<float> got = run(**ranks, got_picks, placed);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << placed;
        EXPECT_EQ(got_picks, want_picks) << placed;
        ASSERT_EQ(got_picks.size(), 3u);
    }
    EXPECT_FALSE(runtime::load_model(dir, *be2, false, 9).ok());  // more ranks than the fixture's 8 experts
}

TEST(ExpertParallel, TwoRanksEqualOneOnCpuFp8) { expect_ranks_equal_one("v4_tiny_fp8", 2, false); }
TEST(ExpertParallel, FourRanksEqualOneOnCpuFp32) { expect_ranks_equal_one("v4_tiny_fp32", 4, false); }
TEST(ExpertParallel, ThreeRanksEqualOneOnRef) { expect_ranks_equal_one("v4_tiny_fp8", 3, true); }

}  // namespace
}  // namespace di::model
