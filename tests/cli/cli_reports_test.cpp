// The machine-readable reports of the CLI: `bench --json` (warm-up, repetitions, mean and spread of each
// measure) and `inspect --json` (config, layers, kernel variants) on the tiny fixture, read back as JSON
// and checked against the fixture's own config.json; and the default backend choice ("auto").
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace di::test {
namespace {

namespace fs = std::filesystem;
const fs::path kFixture = fs::path(DI_TEST_DATA) / "v4_tiny_fp32";

nlohmann::json fixture_config() {
    std::ifstream f(kFixture / "config.json");
    return nlohmann::json::parse(f);
}

TEST(CliReports, BenchJsonHasEveryRunAndItsSpread) {
    const CliRun r =
        run_cli("bench --model " + kFixture.string() + " --prompt 5 --decode 3 -r 3 --warmup 1 --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);  // stdout is one JSON object, nothing else
    EXPECT_EQ(j["repetitions"], 3);
    EXPECT_EQ(j["warmup"], 1);
    EXPECT_EQ(j["prompt_tokens"], 5);
    EXPECT_EQ(j["decode_steps"], 3);
    EXPECT_EQ(j["model"]["layers"], fixture_config()["num_hidden_layers"]);
    EXPECT_EQ(j["model"]["hidden"], fixture_config()["hidden_size"]);
    // the step arena after a 5-token prefill holds at least its residual streams (hc_mult x hidden f32 a
    // token)
    EXPECT_GE(j["activation_bytes"].get<int64_t>(), 5 * 4 * fixture_config()["hidden_size"].get<int64_t>() *
                                                        fixture_config()["hc_mult"].get<int64_t>());
    for (const char* m : {"prefill_tokens_per_s", "decode_tokens_per_s", "ms_per_step"}) {
        const nlohmann::json& s = j[m];
        ASSERT_EQ(s["runs"].size(), 3u) << m;
        double lo = 1e300, hi = 0, sum = 0;
        for (double v : s["runs"]) lo = std::min(lo, v), hi = std::max(hi, v), sum += v;
        EXPECT_GT(lo, 0) << m;
        EXPECT_DOUBLE_EQ(s["min"].get<double>(), lo) << m;
        EXPECT_DOUBLE_EQ(s["max"].get<double>(), hi) << m;
        EXPECT_NEAR(s["mean"].get<double>(), sum / 3, 1e-9 * sum) << m;
        EXPECT_GE(s["stddev"].get<double>(), 0) << m;
        EXPECT_LE(s["stddev"].get<double>(), hi - lo + 1e-12)
            << m;  // a sample stddev of 3 values never exceeds the range
    }
}

// --context: decode after a synthetic state of that many tokens, rounded up to the largest compression rate
// (the fixture's HCA rate, 16); past max_position_embeddings a one-line error.
TEST(CliReports, BenchContextIsRoundedAndBounded) {
    const CliRun r = run_cli("bench --model " + kFixture.string() +
                             " --backend cpu --prompt 3 --decode 2 -r 1 --warmup 0 --context 100 --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["context"], 112);
    EXPECT_GT(j["decode_tokens_per_s"]["mean"].get<double>(), 0);
    const CliRun too_long = run_cli("bench --model " + kFixture.string() +
                                    " --backend cpu --prompt 3 --decode 2 --context 16380");
    EXPECT_NE(too_long.rc, 0);
    EXPECT_NE(too_long.err.find("exceed the model's 16384 positions"), std::string::npos) << too_long.err;
}

// --profile: the last run's ops, prefill and decode apart; one step's counts follow from the config (the
// head once per step, the routed experts once per layer, the embedding once per hyper-connection stream).
TEST(CliReports, BenchProfileSplitsPrefillAndDecode) {
    const CliRun r = run_cli("bench --model " + kFixture.string() +
                             " --backend cpu --prompt 5 --decode 3 -r 2 --warmup 0 --profile --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const int64_t layers = fixture_config()["num_hidden_layers"], hc = fixture_config()["hc_mult"];
    auto calls = [&](const char* phase, const char* op) -> int64_t {
        for (const nlohmann::json& e : j["profile"][phase])
            if (e["op"] == op) {
                EXPECT_GT(e["seconds"].get<double>(), 0) << phase << " " << op;
                return e["calls"];
            }
        return 0;
    };
    EXPECT_EQ(calls("prefill", "hc_head_norm"), 1);
    EXPECT_EQ(calls("decode", "hc_head_norm"), 3);
    EXPECT_EQ(calls("prefill", "moe"), layers);
    EXPECT_EQ(calls("decode", "moe"), 3 * layers);
    EXPECT_EQ(calls("decode", "embed"), 3 * hc);
    // flops (ops/compare/op_flops.h): the routed experts' products of every (token, slot) pair of every
    // layer, 6 hidden moe_dim each (up 2 x 2 I D, down 2 D I); none for a norm
    auto flops = [&](const char* phase, const char* op) -> double {
        for (const nlohmann::json& e : j["profile"][phase])
            if (e["op"] == op) return e["flops"];
        return -1;
    };
    const double D = fixture_config()["hidden_size"], I = fixture_config()["moe_intermediate_size"],
                 k = fixture_config()["num_experts_per_tok"];
    EXPECT_EQ(flops("prefill", "moe"), double(layers) * 5 * k * 6 * D * I);
    EXPECT_EQ(flops("decode", "moe"), double(layers) * 3 * k * 6 * D * I);
    EXPECT_GT(flops("prefill", "linear"), 0);
    EXPECT_GT(flops("prefill", "attention"), 0);
    EXPECT_EQ(flops("prefill", "hc_head_norm"), 2.0 * 5 * hc * (hc * D));  // the 5 rows' hc x (hc D) mix
    EXPECT_EQ(flops("prefill", "rms_norm_rope"), 0);
}

// --profile-shapes: the same run with linear and attention split apart; the split rows add up to the
// op's row of --profile (calls and flops: both follow from the shapes, not the clock), each linear row names
// a weight shape of the model (q_a: hidden -> q_lora_rank, once a layer), and attention's kinds are the three
// it can take.
TEST(CliReports, BenchProfileShapesSplitsLinearAndAttention) {
    const std::string cmd =
        "bench --model " + kFixture.string() + " --backend cpu --prompt 9 --decode 2 -r 1 --warmup 0 --json";
    const CliRun whole = run_cli(cmd + " --profile"), split = run_cli(cmd + " --profile-shapes");
    ASSERT_EQ(whole.rc, 0) << whole.err;
    ASSERT_EQ(split.rc, 0) << split.err;
    const nlohmann::json w = nlohmann::json::parse(whole.out), p = nlohmann::json::parse(split.out);
    const int64_t layers = fixture_config()["num_hidden_layers"], hidden = fixture_config()["hidden_size"],
                  q_rank = fixture_config()["q_lora_rank"];
    const std::string q_a = "linear f32 " + std::to_string(hidden) + "->" + std::to_string(q_rank);
    for (const char* phase : {"prefill", "decode"}) {
        for (const char* op : {"linear", "attention"}) {
            int64_t whole_calls = -1, split_calls = 0;
            double whole_flops = -1, split_flops = 0;
            for (const nlohmann::json& e : w["profile"][phase])
                if (e["op"] == op) whole_calls = e["calls"], whole_flops = e["flops"];
            for (const nlohmann::json& e : p["profile"][phase]) {
                const std::string name = e["op"];
                EXPECT_NE(name, op) << phase << ": the op's own row is split";
                if (name.rfind(std::string(op) + " ", 0) != 0) continue;
                split_calls += e["calls"].get<int64_t>(), split_flops += e["flops"].get<double>();
                if (std::string(op) == "attention")
                    EXPECT_TRUE(name == "attention window" || name == "attention csa" ||
                                name == "attention hca")
                        << name;
                else
                    EXPECT_EQ(name.rfind("linear f32 ", 0), 0u) << name;  // the fixture's weights are f32
            }
            EXPECT_GT(whole_calls, 0) << phase << " " << op;
            EXPECT_EQ(split_calls, whole_calls) << phase << " " << op;
            EXPECT_DOUBLE_EQ(split_flops, whole_flops) << phase << " " << op;
        }
        int64_t q_a_calls = 0;
        for (const nlohmann::json& e : p["profile"][phase])
            if (e["op"] == q_a) q_a_calls = e["calls"];
        EXPECT_GE(q_a_calls, std::string(phase) == "prefill" ? layers : 2 * layers) << q_a;
    }
}

TEST(CliReports, BenchRejectsZeroRepetitionsInOneLine) {
    const CliRun r = run_cli("bench --model " + kFixture.string() + " -r 0");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("--repetitions must be >= 1"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(CliReports, InspectJsonMatchesTheConfig) {
    const CliRun r = run_cli("inspect " + kFixture.string() + " --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const nlohmann::json cfg = fixture_config();
    EXPECT_EQ(j["config"]["hidden_dim"], cfg["hidden_size"]);
    EXPECT_EQ(j["config"]["vocab_size"], cfg["vocab_size"]);
    EXPECT_EQ(j["config"]["n_experts"], cfg["n_routed_experts"]);
    EXPECT_EQ(j["layers"].size(), cfg["num_hidden_layers"].get<size_t>());
    EXPECT_GT(j["params"].get<int64_t>(), 0);
    if (j["backend"] == "cpu") {  // what the kernels run on: threads, instruction set, AMX tiles or not
        EXPECT_NE(j["hardware"].get<std::string>().find("thread"), std::string::npos) << j["hardware"];
    }
    bool fallback = false;
    for (const auto& v : j["kernel_variants"]) {
        const std::string st = v["status"];
        EXPECT_TRUE(st == "fallback" || st == "allowed" || st == "not allowed") << st;
        fallback |= st == "fallback";
    }
    EXPECT_TRUE(fallback) << "every op has a fallback";
}

// Without --backend the fastest verified backend of the machine runs, and the report says why.
TEST(CliReports, DefaultBackendIsChosenAndExplained) {
    const CliRun r =
        run_cli("bench --model " + kFixture.string() + " --prompt 2 --decode 1 -r 1 --warmup 0 --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const std::string backend = j["backend"], why = j["backend_reason"];
    EXPECT_TRUE(backend == "cpu" || backend == "cuda") << backend;
    EXPECT_EQ(why.rfind("auto: ", 0), 0u) << why;
    const CliRun asked = run_cli("bench --model " + kFixture.string() +
                                 " --backend ref --prompt 2 --decode 1 -r 1 --warmup 0 --json");
    ASSERT_EQ(asked.rc, 0) << asked.err;
    EXPECT_EQ(nlohmann::json::parse(asked.out)["backend"], "ref");
}

}  // namespace
}  // namespace di::test
