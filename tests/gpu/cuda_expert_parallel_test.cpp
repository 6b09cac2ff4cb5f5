// Expert parallelism on the GPUs of one host through NCCL (`--gpus N`): rank r on GPU r, holding block r of
// the routed experts, each sequence on one GPU (data-parallel attention) and the MoE's tokens exchanged by
// NCCL's all-to-all, gives the one-GPU logits bit for bit on two sequences of different lengths per step
// (each GPU then runs fewer rows than the one GPU: the kernels these sizes take compute a row the same
// whatever the batch, docs/cuda.md); and asking for more GPUs than the machine has is an error, not a crash.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

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

// Every step's logits: a 9-token and a 4-token prompt in one step, then 6 decode steps of both.
std::vector<float> steps(model::Model& m, const std::vector<int32_t>& tokens) {
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
        const std::vector<float> l = m.forward(chunks);
        out.insert(out.end(), l.begin(), l.end());
    }
    return out;
}

// The ranked model: `ranks` GPUs through NCCL (`--gpus`), or `ranks` ranks on GPU 0 exchanging device memory
// through cudaMemcpy (a local group: NCCL takes one rank a device), which runs the exchange's data flow on
// the GPU backend on a machine of one GPU.
Result<std::unique_ptr<model::Model>> load_ranks(const std::string& dir, ops::Backend& be, int ranks,
                                                 bool on_one_gpu) {
    if (!on_one_gpu) return runtime::load_model(dir, be, false, ranks);
    DI_TRY(model::ModelConfig cfg, model::load_config(dir));
    DI_TRY(io::Checkpoint ck, io::Checkpoint::open(dir));
    auto comms = parallel::make_local_group(
        ranks, std::chrono::seconds(120),
        [](void* dst, const void* src, size_t bytes) { cudaMemcpy(dst, src, bytes, cudaMemcpyDefault); });
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
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
        << ranks << (on_one_gpu ? " ranks on one GPU" : " GPUs") << " differ from one rank";
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
