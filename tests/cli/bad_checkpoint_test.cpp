// Bad input through the real CLI: each broken checkpoint, config or token list gives exit code 1 and one
// line on stderr naming the offending file, tensor, field or value -- never a crash or garbage output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace di::test {
namespace {

namespace fs = std::filesystem;
const fs::path kFixture = fs::path(DI_TEST_DATA) / "v4_tiny_fp32";

// A fresh copy of the fixture whose tensors pass through `edit` before being written back.
class BadCheckpoint : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("di_bad_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        fs::copy_file(kFixture / "config.json", dir_ / "config.json");
        fs::copy_file(kFixture / "model.safetensors", dir_ / "model.safetensors");
    }
    void TearDown() override { fs::remove_all(dir_); }

    void rewrite(const std::function<void(std::vector<io::TensorToWrite>&)>& edit) {
        std::vector<io::TensorToWrite> ts;
        {
            auto ck = io::Checkpoint::open(kFixture.string());
            ASSERT_TRUE(ck.ok());
            for (const auto& [name, e] : ck->tensors())
                ts.push_back({name, e.st_dtype, e.shape, std::vector<uint8_t>(e.data, e.data + e.nbytes)});
        }
        edit(ts);
        ASSERT_TRUE(io::write_safetensors((dir_ / "model.safetensors").string(), ts).ok());
    }
    void edit_config(const std::function<void(nlohmann::json&)>& edit) {
        nlohmann::json j = nlohmann::json::parse(std::ifstream(kFixture / "config.json"));
        edit(j);
        std::ofstream(dir_ / "config.json") << j.dump();
    }
    // Runs `score` on the broken copy; expects exit 1 and a single line containing `needle`.
    void expect_error(const std::string& needle, const std::string& tokens = "1,2,3") {
        const CliRun r = run_cli("score --model " + dir_.string() + " --tokens " + tokens);
        EXPECT_EQ(r.rc, 1) << r.err;
        EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_EQ(r.err.rfind("deepinfer: ", 0), 0u) << r.err;
    }
    fs::path dir_;
};

TEST_F(BadCheckpoint, IntactCopyScores) {
    const CliRun r = run_cli("score --model " + dir_.string() + " --tokens 1,2,3");
    EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(BadCheckpoint, MissingTensor) {
    rewrite([](auto& ts) {
        std::erase_if(ts, [](auto& t) { return t.name == "model.layers.2.attn.wkv.weight"; });
    });
    expect_error("missing tensor 'layers.2.attn.wkv.weight'");
}

TEST_F(BadCheckpoint, ExtraTensor) {
    rewrite([](auto& ts) {
        ts.push_back({"model.layers.0.attn.bogus.weight", "F32", {2}, std::vector<uint8_t>(8)});
    });
    expect_error("unexpected tensor 'model.layers.0.attn.bogus.weight'");
}

TEST_F(BadCheckpoint, WrongShape) {
    rewrite([](auto& ts) {
        for (auto& t : ts)
            if (t.name == "model.layers.1.attn.wq_a.weight") {
                t.shape = {64, 256};
                t.bytes.resize(64 * 256 * 4);
            }
    });
    expect_error("'model.layers.1.attn.wq_a.weight' has shape [64, 256], expected [128, 256]");
}

TEST_F(BadCheckpoint, WrongDtype) {
    rewrite([](auto& ts) {
        for (auto& t : ts)
            if (t.name == "model.norm.weight") t.st_dtype = "I32";
    });
    expect_error("'model.norm.weight' has dtype I32");
}

TEST_F(BadCheckpoint, TruncatedFile) {
    fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") / 2);
    expect_error("model.safetensors");
}

TEST_F(BadCheckpoint, UnknownArchitecture) {
    edit_config([](auto& j) {
        j["architectures"] = {"LlamaForCausalLM"};
        j["model_type"] = "llama";
    });
    expect_error("LlamaForCausalLM");
}

TEST_F(BadCheckpoint, InconsistentConfig) {
    edit_config([](auto& j) { j["num_hidden_layers"] = 7; });
    expect_error("layer_types");
}

TEST_F(BadCheckpoint, TokenOutOfRange) {
    expect_error("token id 256 at index 1 is outside the vocabulary (256)", "5,256");
}

TEST_F(BadCheckpoint, MalformedTokenList) { expect_error("'x7' is not a token id", "5,x7"); }

TEST_F(BadCheckpoint, ConfigValuesThatAbortedAtRequestTime) {
    edit_config([](auto& j) { j["sliding_window"] = 1; });
    expect_error("field 'sliding_window': 1 is outside the supported range [2, 65536]");
    edit_config([](auto& j) { j["sliding_window"] = 1000000000; });
    expect_error("field 'sliding_window': 1000000000 is outside the supported range");
    edit_config([](auto& j) { j["eos_token_id"] = 256; });
    expect_error("field 'eos_token_id': 256 is outside the vocabulary [0, 256)");
    edit_config([](auto& j) { j["eos_token_id"] = -3; });
    expect_error("field 'eos_token_id': -3 is outside the vocabulary");
}

TEST_F(BadCheckpoint, ExpertIdsOutsideTheRange) {
    rewrite([](auto& ts) {
        for (auto& t : ts)
            if (t.name == "model.layers.1.ffn.gate.tid2eid") {
                const int64_t bad = 9999;
                std::memcpy(t.bytes.data() + 8 * 37, &bad, 8);
            }
    });
    expect_error("tensor 'model.layers.1.ffn.gate.tid2eid' holds 9999 at flat index 37, outside [0, ");
}

// A NaN weight: score warns and still writes, generate stops with an error, --check-weights names it.
TEST_F(BadCheckpoint, NonFiniteWeights) {
    rewrite([](auto& ts) {
        for (auto& t : ts)
            if (t.name == "model.norm.weight") {
                const float nan = std::nanf("");
                std::memcpy(t.bytes.data() + 4 * 5, &nan, 4);
            }
    });
    const CliRun score = run_cli("score --model " + dir_.string() + " --tokens 1,2,3");
    EXPECT_EQ(score.rc, 0) << score.err;
    EXPECT_NE(score.err.find("warning: 768 of 768 logits are non-finite"), std::string::npos) << score.err;
    const CliRun gen = run_cli("generate --model " + dir_.string() + " --tokens 1,2,3 --max-new-tokens 4");
    EXPECT_EQ(gen.rc, 1) << gen.err;
    EXPECT_NE(gen.err.find("the model produced a non-finite logit (nan for token id 0) at position 2"),
              std::string::npos)
        << gen.err;
    const CliRun checked = run_cli("score --check-weights --model " + dir_.string() + " --tokens 1,2,3");
    EXPECT_EQ(checked.rc, 1) << checked.err;
    EXPECT_NE(checked.err.find("tensor 'model.norm.weight' (F32) holds a NaN or infinity at flat index 5"),
              std::string::npos)
        << checked.err;
}

TEST_F(BadCheckpoint, HugeGenerationLengthIsRefused) {
    const CliRun r = run_cli("generate --model " + dir_.string() +
                             " --tokens 1,2 --max-new-tokens "
                             "9223372036854775807");
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("exceeds the model's context"), std::string::npos) << r.err;
}

// serve checks every option before it starts: NaN, zero and negative values are one-line errors.
TEST_F(BadCheckpoint, ServeRefusesBadOptions) {
    for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
             {"--request-timeout nan", "--request-timeout nan must be a number of seconds"},
             {"--request-timeout -5", "--request-timeout -5 must be"},
             {"--max-body-bytes 0", "--max-body-bytes 0 must be in [64, 2^32]"},
             {"--max-body-bytes -1", "--max-body-bytes -1 must be in"},
             {"--threads 1", "--threads 1 must be in [4, 4096]"},
             {"--read-timeout 0", "--read-timeout 0 must be in [1, 86400] seconds"}}) {
        const CliRun r = run_cli("serve --model " + dir_.string() + " " + args);
        EXPECT_EQ(r.rc, 1) << args << ": " << r.err;
        EXPECT_NE(r.err.find(says), std::string::npos) << args << ": " << r.err;
    }
}

// The model directory as the positional argument or -m, as other engines take it; --version.
TEST_F(BadCheckpoint, ModelAsPositionalOrShortOption) {
    EXPECT_EQ(run_cli("score " + dir_.string() + " --tokens 1,2,3").rc, 0);
    EXPECT_EQ(run_cli("score -m " + dir_.string() + " --tokens 1,2,3").rc, 0);
    EXPECT_EQ(run_cli("--version").rc, 0);
}

TEST_F(BadCheckpoint, MissingModelDirectory) {
    const CliRun r = run_cli("score --model /nonexistent/model --tokens 1");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace di::test
