// `--speculative mtp` as a user runs it, on the demo model (random weights with an MTP block): greedy output
// equal to that without it, the drafts counted in --stats, and an unknown method refused in one line.
#include <gtest/gtest.h>

#include <string>

#include "cli_run.h"

namespace di {
namespace {

using test::CliRun;
using test::run_cli;

TEST(CliSpeculative, GreedyTokensEqualWithoutIt) {
    const std::string args =
        "generate --backend cpu --tokens 17,4090,311,2 --temperature 0 --max-new-tokens 40 "
        "--output ids --stats --speculative ";
    const CliRun off = run_cli(args + "off"), on = run_cli(args + "mtp");
    ASSERT_EQ(off.rc, 0) << off.err;
    ASSERT_EQ(on.rc, 0) << on.err;
    EXPECT_EQ(on.out, off.out);
    EXPECT_NE(on.out.find('['), std::string::npos) << on.out;
    EXPECT_NE(on.err.find("drafts kept"), std::string::npos) << on.err;
    EXPECT_EQ(off.err.find("drafts kept"), std::string::npos) << off.err;
    const CliRun bad = run_cli("generate --backend cpu --tokens 1 --speculative eagle");
    EXPECT_NE(bad.rc, 0);
    EXPECT_NE(bad.err.find("--speculative"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace di
