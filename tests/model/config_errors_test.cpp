// parse_config / load_config rejections beyond the transformers-generated error vectors: each error is one
// line naming the file, the field and the offending value.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io_test_util.h"
#include "model/config.h"

namespace di::model {
namespace {

using nlohmann::json;

// A small valid config; each test breaks one thing.
json base() {
    return json::parse(R"({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
        "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "head_dim": 64,
        "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 16, "sliding_window": 8, "index_n_heads": 2,
        "index_head_dim": 32, "index_topk": 4, "n_routed_experts": 8, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "max_position_embeddings": 8192})");
}

void expect_error(const json& cfg, std::initializer_list<std::string> parts) {
    auto r = parse_config(cfg.dump(), "m/config.json");
    ASSERT_FALSE(r.ok()) << cfg.dump();
    const std::string& msg = r.error().message;
    EXPECT_EQ(msg.rfind("m/config.json: ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts)
        EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
}

json with(json j, const std::string& key, json v) {
    j[key] = std::move(v);
    return j;
}

TEST(ConfigErrors, BaseIsValid) {
    auto r = parse_config(base().dump(), "m/config.json");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->rope_dim, 8);
}

TEST(ConfigErrors, NotJsonOrNotObject) {
    auto r = parse_config("{\"vocab_size\": ", "m/config.json");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("m/config.json: invalid JSON"), std::string::npos) << r.error().message;
    expect_error(json::array({1, 2}), {"JSON object", "array"});
}

TEST(ConfigErrors, Architecture) {
    json j = base();
    j["architectures"] = {"DeepseekV3ForCausalLM"};
    j["model_type"] = "deepseek_v3";
    expect_error(j, {"unknown architecture", "DeepseekV3ForCausalLM", "deepseek_v3"});
    j.erase("architectures");
    j.erase("model_type");
    expect_error(j, {"unknown architecture"});
    j["model_type"] = "deepseek_v4";  // model_type alone is enough
    EXPECT_TRUE(parse_config(j.dump(), "m/config.json").ok());
    expect_error(with(base(), "architectures", "DeepseekV4ForCausalLM"),
                 {"architectures", "list of strings"});
}

TEST(ConfigErrors, WrongJsonTypes) {
    expect_error(with(base(), "num_hidden_layers", "4"), {"'num_hidden_layers'", "integer", "string \"4\""});
    expect_error(with(base(), "head_dim", true), {"'head_dim'", "boolean true"});
    expect_error(with(base(), "rms_norm_eps", 1), {"'rms_norm_eps'", "float", "integer 1"});
    expect_error(with(base(), "rope_theta", "big"), {"'rope_theta'", "number"});
    expect_error(with(base(), "tie_word_embeddings", 0), {"'tie_word_embeddings'", "integer 0"});
    expect_error(with(base(), "layer_types", "sliding_attention"), {"'layer_types'", "list"});
    expect_error(with(base(), "mlp_layer_types", json::array({1, 2, 3, 4})),
                 {"'mlp_layer_types'", "entry 0"});
    expect_error(with(base(), "compress_ratios", json::array({0, "4", 128, 4})),
                 {"'compress_ratios'", "entry 1"});
    expect_error(with(base(), "rope_scaling", "yarn"), {"'rope_scaling'", "object"});
    expect_error(with(base(), "partial_rotary_factor", 1), {"'partial_rotary_factor'", "integer 1"});
    expect_error(with(base(), "eos_token_id", json::array({1, 2.5})), {"'eos_token_id'", "[1,2.5]"});
    expect_error(with(base(), "quantization_config", "fp8"), {"'quantization_config'", "object"});
}

TEST(ConfigErrors, NonPositiveSizes) {
    for (const char* key :
         {"vocab_size", "hidden_size", "num_attention_heads", "head_dim", "q_lora_rank", "o_lora_rank",
          "sliding_window", "index_n_heads", "index_head_dim", "index_topk", "hc_mult", "n_routed_experts",
          "num_experts_per_tok", "moe_intermediate_size", "max_position_embeddings"}) {
        expect_error(with(base(), key, 0), {std::string("'") + key + "'", "> 0", "got 0"});
        expect_error(with(base(), key, -7), {std::string("'") + key + "'", "got -7"});
    }
    expect_error(with(base(), "swiglu_limit", 0.0), {"'swiglu_limit'", "> 0"});
    expect_error(with(base(), "num_hash_layers", -1), {"'num_hash_layers'", "-1"});
}

TEST(ConfigErrors, Consistency) {
    expect_error(with(with(base(), "num_attention_heads", 6), "o_groups", 4), {"'o_groups'", "6", "4"});
    expect_error(with(base(), "num_experts_per_tok", 9), {"'num_experts_per_tok'", "9", "8"});
    expect_error(with(base(), "qk_rope_head_dim", 7), {"'qk_rope_head_dim'", "7 rotary dims"});
    expect_error(with(base(), "partial_rotary_factor", 2.0), {"'partial_rotary_factor'", "128 rotary dims"});
    expect_error(with(base(), "partial_rotary_factor", 1e300),
                 {"'partial_rotary_factor'", "1e+300"});  // fuzz find
    expect_error(with(base(), "partial_rotary_factor", -0.5), {"'partial_rotary_factor'", "-32 rotary dims"});
    expect_error(with(base(), "index_head_dim", 4), {"'index_head_dim'", "4", "8 rotary dims"});
    expect_error(with(base(), "layer_types",
                      json::array({"sliding_attention", "moe", "sliding_attention", "sliding_attention"})),
                 {"'layer_types'", "entry 1", "'moe'"});
    expect_error(with(base(), "compress_rates", {{"compressed_sparse_attention", 4}}),
                 {"'compress_rates'", "heavily_compressed_attention"});
    expect_error(with(base(), "compress_rates",
                      {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 0}}),
                 {"compress_rates.heavily_compressed_attention", "integer 0"});
    expect_error(with(base(), "compress_rate_csa", 2.5), {"'compress_rate_csa'", "float 2.5"});
}

TEST(ConfigErrors, UnsupportedValues) {
    expect_error(with(base(), "hidden_act", "gelu"), {"'hidden_act'", "'gelu'"});
    expect_error(with(base(), "expert_dtype", "int4"), {"'expert_dtype'", "'int4'"});
    expect_error(with(base(), "quantization_config", {{"quant_method", "awq"}}),
                 {"'quantization_config.quant_method'", "'awq'"});
    expect_error(with(base(), "quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {128}}}),
                 {"'quantization_config.weight_block_size'", "[128]"});
}

TEST(ConfigErrors, Rope) {
    expect_error(with(base(), "rope_scaling", {{"type", "linear"}, {"factor", 2.0}}),
                 {"'rope_parameters.compress.rope_type'", "'linear'"});
    expect_error(with(base(), "rope_scaling", {{"type", "yarn"}, {"factor", "16"}}),
                 {"'rope_parameters.compress.factor'", "string \"16\""});
    expect_error(with(base(), "rope_scaling", {{"type", "yarn"}, {"factor", -2.0}}),
                 {"'rope_parameters.compress.factor'", "-2"});
    expect_error(with(base(), "rope_scaling",
                      {{"type", "yarn"}, {"factor", 2.0}, {"original_max_position_embeddings", nullptr}}),
                 {"'rope_parameters.compress.original_max_position_embeddings'", "null"});
    expect_error(
        with(base(), "rope_parameters", {{"main", nullptr}, {"compress", {{"rope_type", "default"}}}}),
        {"'rope_parameters'", "'main' is null"});
    expect_error(with(base(), "rope_parameters",
                      {{"main", {{"rope_type", "default"}, {"partial_rotary_factor", 0.125}}},
                       {"compress",
                        {{"rope_type", "default"}, {"rope_theta", 1.0}, {"partial_rotary_factor", 0.125}}}}),
                 {"'rope_parameters.compress.rope_theta'", "must be in (1, 3e38)", "got 1"});
}

TEST(ConfigErrors, FlatYarnGetsAttentionFactorOneNestedDoesNot) {
    // Spec 1.2 rule 6, checked on the folded tables directly.
    json flat = with(base(), "rope_scaling",
                     {{"type", "yarn"}, {"factor", 16.0}, {"original_max_position_embeddings", 512}});
    auto f = parse_config(flat.dump(), "m/config.json");
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_TRUE(f->rope_compress.has_attention_factor);
    EXPECT_EQ(rope_freqs(f->rope_compress, f->rope_dim, f->max_position_embeddings).mscale, 1.0f);
    EXPECT_EQ(f->rope_compress.theta, 160000.0);
    EXPECT_EQ(f->rope_main.type, "default");
    json nested = with(base(), "rope_parameters",
                       {{"main", {{"rope_type", "default"}, {"partial_rotary_factor", 0.125}}},
                        {"compress",
                         {{"rope_type", "yarn"},
                          {"partial_rotary_factor", 0.125},
                          {"factor", 16.0},
                          {"original_max_position_embeddings", 512}}}});
    auto n = parse_config(nested.dump(), "m/config.json");
    ASSERT_TRUE(n.ok()) << n.error().message;
    EXPECT_FALSE(n->rope_compress.has_attention_factor);
    EXPECT_EQ(n->rope_compress.theta, 10000.0);  // nested sub-dicts default to the top-level rope_theta
    EXPECT_EQ(rope_freqs(n->rope_compress, n->rope_dim, n->max_position_embeddings).mscale,
              float(0.1 * std::log(16.0) + 1.0));
}

TEST(ConfigErrors, LoadConfigFromDirectory) {
    test::TempDir dir;
    auto missing = load_config(dir.str());
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find(dir.file("config.json")), std::string::npos)
        << missing.error().message;
    test::write_bytes(dir.file("config.json"), base().dump(2));
    auto r = load_config(dir.str());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->n_layers, 4);
    test::write_bytes(dir.file("config.json"), with(base(), "o_groups", 3).dump());
    auto bad = load_config(dir.str());
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().message.rfind(dir.file("config.json") + ": field 'o_groups'", 0), 0u)
        << bad.error().message;
}

}  // namespace
}  // namespace di::model
