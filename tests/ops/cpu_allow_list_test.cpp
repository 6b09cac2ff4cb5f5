// The allow-list may only name ops that have a case table in this folder: adding an op to kCpuFastOps
// without tests fails here.
#include <set>
#include <string_view>

#include "cpu_test_util.h"

namespace di::cputest {
namespace {

// Ops with case tables (cpu_<op>_test.cpp) in tests/ops.
// mhc_post: cpu_mhc_test; swiglu, rms_norm, rope: cpu_rowwise_test
const std::set<std::string_view> kTestedOps = {"linear",  "moe",      "attention", "indexer_topk",
                                               "mhc_pre", "hc_head",  "mhc_post",  "compress",
                                               "swiglu",  "rms_norm", "rope"};

TEST(CpuAllowList, EveryFastOpHasCaseTable) {
    for (std::string_view op : ops::kCpuFastOps)
        EXPECT_TRUE(kTestedOps.count(op)) << op << " runs fast untested";
    EXPECT_TRUE(ops::cpu_op_is_fast("linear"));
    EXPECT_FALSE(ops::cpu_op_is_fast("no_such_op"));
    EXPECT_EQ(backends().cpu->name(), "cpu");
}

}  // namespace
}  // namespace di::cputest
