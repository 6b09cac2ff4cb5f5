// Expert parallelism on the GPUs of one host through NCCL (`--gpus N`): rank r on GPU r, holding block r of
// the routed experts, each sequence on one GPU (data-parallel attention) and the MoE's tokens exchanged by
// NCCL's all-to-all, gives the one-GPU logits bit for bit on two sequences of different lengths per step
// (each GPU then runs fewer rows than the one GPU: the kernels these sizes take compute a row the same
// whatever the batch, docs/cuda.md); and asking for more GPUs than the machine has is an error, not a crash.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/expert_parallel_model.h"
#include "model/model.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "parallel/communicator.h"
#include "runtime/backend_factory.h"
#include "runtime/model_loader.h"

namespace di {
namespace {

std::string fixture_dir(const char* name) {
    const char* env =
        std::getenv("DEEPINFER_TEST_DATA");  // the GPU machine runs a copy of the tree elsewhere
    return std::string(env ? env : DI_TEST_DATA) + "/" + name;
}

std::vector<int32_t> prompt(const std::string& dir) {
    std::ifstream f(dir + "/prompt.txt");
    return {std::istream_iterator<int32_t>(f), std::istream_iterator<int32_t>()};
}

// Every step's logits: a 9-token and a 4-token prompt, then 6 decode steps of both; together: both in one
// step (else each in its own step: the rows each rank's dense ops see when the sequences live on two ranks).
std::vector<float> steps(model::Model& m, const std::vector<int32_t>& tokens, bool together = true) {
    auto a = m.new_state(64), b = m.new_state(64);
    const std::vector<int32_t> pa(tokens.begin(), tokens.begin() + 9),
        pb(tokens.begin() + 3, tokens.begin() + 7);
    std::vector<float> out;
    for (int step = 0; step < 7; ++step) {
        const model::SeqChunk chunks[] = {
            {a.get(), step == 0 ? std::span<const int32_t>(pa) : std::span(tokens).subspan(9 + step, 1),
             true},
            {b.get(), step == 0 ? std::span<const int32_t>(pb) : std::span(tokens).subspan(20 + step, 1),
             false}};
        for (int i = 0; i < (together ? 1 : 2); ++i) {
            const std::vector<float> l =
                m.forward(together ? std::span(chunks) : std::span(chunks).subspan(size_t(i), 1));
            out.insert(out.end(), l.begin(), l.end());
        }
    }
    return out;
}

// The first differing logit and the largest difference over the largest logit (to tell rounding from wrong
// rows).
struct Gap {
    size_t first;
    float rel;
};
Gap gap(const std::vector<float>& got, const std::vector<float>& want) {
    Gap g{want.size(), 0};
    float most = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (got[i] != want[i] && g.first == want.size()) g.first = i;
        most = std::max(most, std::fabs(got[i] - want[i]));
        scale = std::max(scale, std::fabs(want[i]));
    }
    g.rel = most / scale;
    return g;
}

// The ranked model: `ranks` GPUs through NCCL (`--gpus`), or `ranks` ranks on GPU 0 exchanging device memory
// through cudaMemcpy (a local group: NCCL takes one rank a device), which runs the exchange's data flow on
// the GPU backend on a machine of one GPU.
Result<std::unique_ptr<model::Model>> load_ranks(const std::string& dir, ops::Backend& be, int ranks,
                                                 bool on_one_gpu) {
    if (!on_one_gpu) return runtime::load_model(dir, be, false, ranks);
    DI_TRY(model::ModelConfig cfg, model::load_config(dir));
    DI_TRY(io::Checkpoint ck, io::Checkpoint::open(dir));
    auto comms = parallel::make_local_group(ranks, std::chrono::seconds(120),
                                            [](void* dst, const void* src, size_t bytes) {
                                                // A device-to-device cudaMemcpy may return before it is done,
                                                // and the receiving rank's stream does not wait for the
                                                // legacy stream: the copy ends before the receiver reads.
                                                cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
                                                cudaDeviceSynchronize();
                                            });
    return model::ExpertParallelModel::load(std::move(cfg), std::make_shared<io::Checkpoint>(std::move(ck)),
                                            be, std::move(comms),
                                            [](int) { return runtime::make_backend("cuda"); });
}

void expect_ranks_equal_one(int ranks, bool on_one_gpu, model::Precision p) {
    if (ops::cuda_device_count() < (on_one_gpu ? 1 : ranks)) GTEST_SKIP() << "needs " << ranks << " GPUs";
    const std::string dir = fixture_dir("v4_tiny_fp8");
    const std::vector<int32_t> tokens = prompt(dir);
    ASSERT_GE(tokens.size(), 30u);
    auto be1 = runtime::make_backend("cuda"), ben = runtime::make_backend("cuda");
    ASSERT_TRUE(be1.ok() && ben.ok());
    auto one = runtime::load_model(dir, **be1);
    ASSERT_TRUE(one.ok()) << one.error().message;
    auto many = load_ranks(dir, **ben, ranks, on_one_gpu);
    ASSERT_TRUE(many.ok()) << many.error().message;
    (*one)->set_precision(p), (*many)->set_precision(p);
    const std::vector<float> want = steps(**one, tokens), got = steps(**many, tokens);
    ASSERT_EQ(got.size(), want.size());
    const Gap g = gap(got, want);
    // Each rank's dense ops see only its own sequences' rows. Where one rank's logits do not depend on what
    // shares the step (the kernels these sizes take, docs/cuda.md), the ranks must give its bits; where they
    // do, they must give the bits of one rank running each sequence in its own step (the rows each rank's
    // dense ops see; the MoE's pairs do not depend on the batch).
    const std::vector<float> apart = steps(**one, tokens, false);
    const Gap own = gap(apart, want), g_apart = gap(got, apart);
    const std::string what = std::to_string(ranks) + (on_one_gpu ? " ranks on one GPU" : " GPUs");
    if (own.first == want.size()) {
        EXPECT_EQ(g.first, want.size()) << what << " differ from one rank: first at logit " << g.first
                                        << " of " << want.size() << ", max |d| / max |logit| " << g.rel;
    } else {
        EXPECT_EQ(g_apart.first, want.size())
            << what << " differ from one rank with each sequence in its own step: first at logit "
            << g_apart.first << ", max |d| / max |logit| " << g_apart.rel << " (from one rank's shared steps "
            << g.rel << ")";
        std::printf(
            "%s: one rank's logits depend on what shares a step here (first at logit %zu, max |d| / "
            "max |logit| %.3g); the ranks' equal its logits with each sequence in its own step: %s\n",
            what.c_str(), own.first, double(own.rel), g_apart.first == want.size() ? "yes" : "no");
    }
}

TEST(CudaExpertParallel, TwoGpusEqualOneExact) { expect_ranks_equal_one(2, false, model::Precision::kExact); }
TEST(CudaExpertParallel, TwoGpusEqualOneNative) {
    expect_ranks_equal_one(2, false, model::Precision::kNative);
}
TEST(CudaExpertParallel, FourGpusEqualOne) { expect_ranks_equal_one(4, false, model::Precision::kExact); }
TEST(CudaExpertParallel, TwoRanksOnOneGpuEqualOneExact) {
    expect_ranks_equal_one(2, true, model::Precision::kExact);
}
TEST(CudaExpertParallel, ThreeRanksOnOneGpuEqualOneNative) {
    expect_ranks_equal_one(3, true, model::Precision::kNative);
}

TEST(CudaExpertParallel, MoreGpusThanPresentIsAnError) {
    const int have = ops::cuda_device_count();
    if (have == 0) GTEST_SKIP() << "no CUDA device";
    if (have + 1 > 8) GTEST_SKIP() << "the fixture has 8 experts";
    auto be = runtime::make_backend("cuda");
    ASSERT_TRUE(be.ok());
    auto m = runtime::load_model(fixture_dir("v4_tiny_fp8"), **be, false, have + 1);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message.find("GPUs"), std::string::npos) << m.error().message;
}

}  // namespace
}  // namespace di
