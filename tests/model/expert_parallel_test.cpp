// Expert parallelism on the CPU: ranks in threads, each holding only its block of the routed experts
// (loading by shard) and summing the MoE slots over the ranks, give the one-rank logits bit for bit on the
// golden fixtures (a prefill chunk, then single-token decode steps), and match transformers' logits at the
// goldens' 1e-3 as the one-rank forward does.
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
// --expert-ranks): its states, its rank threads, two sequences of different lengths in one step.
TEST(ExpertParallel, LoadedModelEqualsOneRank) {
    const std::string dir = std::string(DI_TEST_DATA) + "/v4_tiny_fp8";
    const test::Fixture fx = test::load_fixture("v4_tiny_fp8");
    auto be1 = ops::make_cpu_backend(1), be2 = ops::make_cpu_backend(1);
    auto one = runtime::load_model(dir, *be1);
    ASSERT_TRUE(one.ok()) << one.error().message;
    auto ranks = runtime::load_model(dir, *be2, false, 2);
    ASSERT_TRUE(ranks.ok()) << ranks.error().message;
    EXPECT_EQ((*ranks)->state_size().fixed_bytes, 2 * (*one)->state_size().fixed_bytes);
    auto run = [&](Model& m) {
        auto a = m.new_state(64), b = m.new_state(64);
        std::vector<float> out;
        const std::vector<int32_t> pa(fx.prompt.begin(), fx.prompt.begin() + 9),
            pb(fx.prompt.begin() + 3, fx.prompt.begin() + 7);
        for (int step = 0; step < 4; ++step) {
            const SeqChunk chunks[] = {
                {a.get(), step == 0 ? std::span<const int32_t>(pa) : std::span(pa).first(1), true},
                {b.get(), step == 0 ? std::span<const int32_t>(pb) : std::span(pb).last(1), false}};
            const std::vector<float> l = m.forward(chunks);
            out.insert(out.end(), l.begin(), l.end());
        }
        EXPECT_EQ(a->n_tokens(), 9 + 3);
        return out;
    };
    const std::vector<float> want = run(**one), got = run(**ranks);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
    EXPECT_FALSE(runtime::load_model(dir, *be2, false, 9).ok());  // more ranks than the fixture's 8 experts
}

TEST(ExpertParallel, TwoRanksEqualOneOnCpuFp8) { expect_ranks_equal_one("v4_tiny_fp8", 2, false); }
TEST(ExpertParallel, FourRanksEqualOneOnCpuFp32) { expect_ranks_equal_one("v4_tiny_fp32", 4, false); }
TEST(ExpertParallel, ThreeRanksEqualOneOnRef) { expect_ranks_equal_one("v4_tiny_fp8", 3, true); }

}  // namespace
}  // namespace di::model
