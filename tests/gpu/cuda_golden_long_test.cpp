// The FP8 fixture's 1,100-token prompt on the cuda backend (tests/model/long_prompt_golden.h): exact within
// the fp32 bound, native within transformers' own fp8 deviation with the routed experts on the W4A8 kernel
// (its dispatch counted: the check fails where another variant answered).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "../model/long_prompt_golden.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "runtime/backend_factory.h"
#include "runtime/model_loader.h"

namespace di {
namespace {

TEST(CudaGoldenLong, ExactAndNativeOnW4a8) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const char* env =
        std::getenv("DEEPINFER_TEST_DATA");  // the GPU machine runs a copy of the tree elsewhere
    const std::string dir = std::string(env ? env : DI_TEST_DATA) + "/v4_tiny_fp8";
    auto be = runtime::make_backend("cuda");
    ASSERT_TRUE(be.ok());
    auto m = runtime::load_model(dir, **be);
    ASSERT_TRUE(m.ok()) << m.error().message;
    test::expect_long_prompt_golden(**m, dir, "cuda");
    EXPECT_GT((*be)->dispatch_count("moe", "w4a8"), 0) << "the native prefill's MoE did not run on w4a8";
}

}  // namespace
}  // namespace di
