// Bad input through the real CLI: each broken checkpoint, config or token list gives exit code 1 and one
// line on stderr naming the offending file, tensor, field or value -- never a crash or garbage output.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace di::test {
namespace {

namespace fs = std::filesystem;
const fs::path kFixture = fs::path(DI_TEST_DATA) / "v4_tiny_fp32";

struct CliResult {
    int rc = -1;
    std::string err;
};

CliResult run_cli(const std::string& args) {
    const std::string cmd = std::string(DI_BINARY) + " " + args + " 2>&1 >/dev/null";
    CliResult r;
    FILE* p = popen(cmd.c_str(), "r");
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) r.err.append(buf, n);
    const int status = pclose(p);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

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
        const CliResult r = run_cli("score --model " + dir_.string() + " --tokens " + tokens);
        EXPECT_EQ(r.rc, 1) << r.err;
        EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_EQ(r.err.rfind("deepinfer: ", 0), 0u) << r.err;
    }
    fs::path dir_;
};

TEST_F(BadCheckpoint, IntactCopyScores) {
    const CliResult r = run_cli("score --model " + dir_.string() + " --tokens 1,2,3");
    EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(BadCheckpoint, MissingTensor) {
    rewrite([](auto& ts) { std::erase_if(ts, [](auto& t) { return t.name == "model.layers.2.attn.wkv.weight"; }); });
    expect_error("missing tensor 'layers.2.attn.wkv.weight'");
}

TEST_F(BadCheckpoint, ExtraTensor) {
    rewrite([](auto& ts) { ts.push_back({"model.layers.0.attn.bogus.weight", "F32", {2}, std::vector<uint8_t>(8)}); });
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

TEST_F(BadCheckpoint, TokenOutOfRange) { expect_error("token id 256 at index 1 is outside the vocabulary (256)", "5,256"); }

TEST_F(BadCheckpoint, MalformedTokenList) { expect_error("'x7' is not a token id", "5,x7"); }

TEST_F(BadCheckpoint, MissingModelDirectory) {
    const CliResult r = run_cli("score --model /nonexistent/model --tokens 1");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace di::test
