// `deepinfer generate --json-schema FILE` on the demo model (random weights, the real V4 tokenizer): the
// answer parses and satisfies the schema (checked here by hand), and a bad schema file is a one-line error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace di {
namespace {

using test::CliRun;
using test::run_cli;
namespace fs = std::filesystem;

fs::path write_file(const std::string& name, const std::string& text) {
    const fs::path p = fs::temp_directory_path() / (name + std::to_string(::getpid()));
    std::ofstream(p) << text;
    return p;
}

TEST(CliJson, GenerateWithASchemaWritesJsonThatSatisfiesIt) {
    const fs::path schema = write_file("di_schema_", R"({"type": "object", "properties": {
        "sunny": {"type": "boolean"}, "grade": {"type": "string", "enum": ["A", "B", "C"]}},
        "required": ["sunny", "grade"], "additionalProperties": false})");
    for (int seed : {1, 2, 3}) {
        const CliRun r =
            run_cli("generate --backend cpu --prompt \"Weather:\" --temperature 1 --seed " +
                    std::to_string(seed) + " --max-new-tokens 60 --json-schema " + schema.string());
        ASSERT_EQ(r.rc, 0) << r.err;
        const auto j = nlohmann::json::parse(r.out, nullptr, false);
        ASSERT_TRUE(j.is_object()) << "seed " << seed << ": " << r.out;
        EXPECT_EQ(j.size(), 2u) << r.out;
        EXPECT_TRUE(j.contains("sunny") && j["sunny"].is_boolean()) << r.out;
        EXPECT_TRUE(j.contains("grade") && j["grade"].is_string()) << r.out;
    }
    const fs::path bad = write_file("di_bad_schema_", "{\"type\": ");
    const CliRun b = run_cli("generate --backend cpu --prompt x --json-schema " + bad.string());
    EXPECT_EQ(b.rc, 1);
    EXPECT_NE(b.err.find(bad.string()), std::string::npos) << b.err;
    const CliRun missing =
        run_cli("generate --backend cpu --prompt x --json-schema /nonexistent/schema.json");
    EXPECT_EQ(missing.rc, 1);
    EXPECT_NE(missing.err.find("/nonexistent/schema.json"), std::string::npos) << missing.err;
    fs::remove(schema);
    fs::remove(bad);
}

}  // namespace
}  // namespace di
