// `--speculative mtp` as a user runs it, on the demo model (random weights with an MTP block): greedy output
// equal to that without it, also constrained to JSON, the drafts counted in --stats, and an unknown method
// refused in one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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
    // constrained by a JSON schema (whole-row draws under the grammar's mask): the same answer too
    const std::filesystem::path schema =
        std::filesystem::temp_directory_path() / ("di_spec_schema_" + std::to_string(::getpid()));
    std::ofstream(schema) << R"({"type": "object", "properties": {"sunny": {"type": "boolean"}, "note":
        {"type": "string", "maxLength": 24}}, "required": ["sunny", "note"], "additionalProperties": false})";
    const std::string json =
        "generate --backend cpu --prompt \"Weather:\" --temperature 0 --max-new-tokens 60 "
        "--stats --json-schema " +
        schema.string() + " --speculative ";
    const CliRun json_off = run_cli(json + "off"), json_on = run_cli(json + "mtp");
    std::filesystem::remove(schema);
    ASSERT_EQ(json_off.rc, 0) << json_off.err;
    ASSERT_EQ(json_on.rc, 0) << json_on.err;
    EXPECT_EQ(json_on.out, json_off.out);
    EXPECT_NE(json_on.err.find("drafts kept"), std::string::npos) << json_on.err;
    const CliRun bad = run_cli("generate --backend cpu --tokens 1 --speculative eagle");
    EXPECT_NE(bad.rc, 0);
    EXPECT_NE(bad.err.find("--speculative"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace di
