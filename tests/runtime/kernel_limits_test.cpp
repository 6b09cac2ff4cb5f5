// A config above what a backend's kernels take is refused when the model loads (one line naming the field
// and the backend), instead of aborting at the first request (the CUDA kernels cap head_dim, index_topk
// and hc_mult).
#include <gtest/gtest.h>

#include "ref_forwarding_backend.h"
#include "runtime/model_loader.h"

namespace di {
namespace {

// The reference backend with declared kernel limits.
class Limited final : public test::RefForwarding {
  public:
    explicit Limited(ops::KernelLimits l) : lim_(l) {}
    std::string_view name() const override { return "limited"; }
    ops::KernelLimits kernel_limits() const override { return lim_; }

  private:
    ops::KernelLimits lim_;
};

const std::string kModel = std::string(DI_TEST_DATA) + "/v4_tiny_fp32";

TEST(KernelLimits, ConfigAboveTheKernelsIsRefusedAtLoad) {
    Limited roomy({4096, 4096, 8});
    EXPECT_TRUE(runtime::load_model(kModel, roomy).ok());
    for (auto [lim, field] : {std::pair{ops::KernelLimits{8, 0, 0}, "'head_dim'"},
                              std::pair{ops::KernelLimits{0, 1, 0}, "'index_topk'"},
                              std::pair{ops::KernelLimits{0, 0, 1}, "'hc_mult'"}}) {
        Limited tight(lim);
        auto m = runtime::load_model(kModel, tight);
        ASSERT_FALSE(m.ok()) << field;
        EXPECT_NE(m.error().message.find(std::string("field ") + field), std::string::npos)
            << m.error().message;
        EXPECT_NE(m.error().message.find("the limited backend's kernels"), std::string::npos)
            << m.error().message;
    }
}

}  // namespace
}  // namespace di
