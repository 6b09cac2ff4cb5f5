// parse_config + rope_freqs against values produced by transformers 5.17.0 itself
// (tools/make_config_vectors.py -> tests/data/config/vectors.json): every folded field exactly, inv_freq to
// within 1 ulp (see kMaxUlp), attention scaling exactly.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "io_test_util.h"
#include "model/config.h"

namespace di::model {
namespace {

using nlohmann::json;

// inv_freq tolerance: transformers computes base ** (2i/d) with torch's vectorised powf (Sleef, documented
// 1.0-ulp accuracy); rope_freqs uses the correctly rounded pow. The 1/x and YaRN blend that follow are the
// same f32 operations in the same order, so a 1-ulp difference in pow can surface as at most 1 ulp.
constexpr int64_t kMaxUlp = 1;

int64_t ulp_distance(float a, float b) {
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    if ((ia < 0) != (ib < 0)) return a == b ? 0 : INT64_MAX;
    return std::abs(int64_t(ia) - int64_t(ib));
}

const json& vectors() {
    static const json v = json::parse(test::read_bytes(test::test_data_dir() + "/config/vectors.json"));
    return v;
}

double or_default(const json& d, const char* key, double dflt) {
    return d.contains(key) && !d[key].is_null() ? d[key].get<double>() : dflt;
}

// A folded transformers rope sub-dict against our table.
void expect_table(const json& d, const RopeTable& t, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(t.type, d["rope_type"].get<std::string>());
    EXPECT_EQ(t.theta, d["rope_theta"].get<double>());
    EXPECT_EQ(t.partial_rotary_factor, or_default(d, "partial_rotary_factor", 1.0));
    if (t.type != "yarn") return;
    EXPECT_EQ(t.factor_from_positions, d["factor"].is_null());
    if (!d["factor"].is_null()) {
        EXPECT_EQ(t.factor, d["factor"].get<double>());
    }
    EXPECT_EQ(t.original_max_position, d["original_max_position_embeddings"].get<double>());
    // `get(...) or default` in _compute_yarn_parameters.
    const double bf = or_default(d, "beta_fast", 0), bs = or_default(d, "beta_slow", 0);
    EXPECT_EQ(t.beta_fast, bf != 0 ? bf : 32.0);
    EXPECT_EQ(t.beta_slow, bs != 0 ? bs : 1.0);
    const bool has_af = d.contains("attention_factor") && !d["attention_factor"].is_null();
    EXPECT_EQ(t.has_attention_factor, has_af);
    if (has_af) {
        EXPECT_EQ(t.attention_factor, d["attention_factor"].get<double>());
    }
    EXPECT_EQ(t.mscale, or_default(d, "mscale", 0));
    EXPECT_EQ(t.mscale_all_dim, or_default(d, "mscale_all_dim", 0));
}

void expect_freqs(const RopeFreqs& got, const json& want, const std::string& what, int64_t* worst) {
    SCOPED_TRACE(what);
    const auto bits = want["inv_freq_bits"].get<std::vector<uint32_t>>();
    ASSERT_EQ(got.inv_freq.size(), bits.size());
    for (size_t i = 0; i < bits.size(); ++i) {
        float w;
        std::memcpy(&w, &bits[i], 4);
        const int64_t d = ulp_distance(got.inv_freq[i], w);
        *worst = std::max(*worst, d);
        EXPECT_LE(d, kMaxUlp) << "inv_freq[" << i << "] = " << got.inv_freq[i] << ", transformers " << w;
    }
    EXPECT_EQ(got.mscale, float(want["attention_scaling"].get<double>()));
}

void expect_case(const json& c, int64_t* worst_ulp) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    auto r = parse_config(c["config"].dump(), name + "/config.json");
    ASSERT_TRUE(r.ok()) << r.error().message;
    const ModelConfig& m = *r;
    const json& e = c["expect"];
    EXPECT_EQ(m.architecture, "DeepseekV4ForCausalLM");
    const std::pair<const char*, int64_t> ints[] = {{"vocab_size", m.vocab_size},
                                                    {"hidden_size", m.hidden_dim},
                                                    {"num_hidden_layers", m.n_layers},
                                                    {"num_attention_heads", m.n_heads},
                                                    {"head_dim", m.head_dim},
                                                    {"q_lora_rank", m.q_lora_rank},
                                                    {"o_groups", m.o_groups},
                                                    {"o_lora_rank", m.o_lora_rank},
                                                    {"sliding_window", m.window},
                                                    {"index_n_heads", m.index_heads},
                                                    {"index_head_dim", m.index_dim},
                                                    {"index_topk", m.index_topk},
                                                    {"hc_mult", m.hc_mult},
                                                    {"hc_sinkhorn_iters", m.hc_sinkhorn_iters},
                                                    {"n_routed_experts", m.n_experts},
                                                    {"num_experts_per_tok", m.n_experts_active},
                                                    {"n_shared_experts", m.n_shared_experts},
                                                    {"moe_intermediate_size", m.moe_dim},
                                                    {"max_position_embeddings", m.max_position_embeddings},
                                                    {"num_nextn_predict_layers", m.n_mtp_layers},
                                                    {"qk_rope_head_dim", m.rope_dim}};
    for (const auto& [key, v] : ints) EXPECT_EQ(v, e[key].get<int64_t>()) << key;
    const std::pair<const char*, double> reals[] = {{"hc_eps", m.hc_eps},
                                                    {"rms_norm_eps", m.rms_norm_eps},
                                                    {"routed_scaling_factor", m.routed_scaling_factor},
                                                    {"swiglu_limit", m.swiglu_limit}};
    for (const auto& [key, v] : reals) EXPECT_EQ(v, e[key].get<double>()) << key;
    EXPECT_EQ(m.tie_word_embeddings, e["tie_word_embeddings"].get<bool>());
    EXPECT_EQ(m.score_func == ScoreFunc::kSigmoid ? "sigmoid" : "sqrtsoftplus",
              e["scoring_func"].get<std::string>());
    EXPECT_EQ(m.bos_token_id, e["bos_token_id"].is_null() ? -1 : e["bos_token_id"].get<int64_t>());
    std::vector<int64_t> eos;
    if (e["eos_token_id"].is_array())
        eos = e["eos_token_id"].get<std::vector<int64_t>>();
    else if (!e["eos_token_id"].is_null())
        eos = {e["eos_token_id"].get<int64_t>()};
    EXPECT_EQ(m.eos_token_ids, eos);

    ASSERT_EQ(m.attn_types.size(), e["layer_types"].size());
    for (size_t i = 0; i < m.attn_types.size(); ++i) {
        EXPECT_EQ(attn_type_name(m.attn_types[i]), e["layer_types"][i].get<std::string>()) << "layer " << i;
        const int64_t rate = m.attn_types[i] == AttnType::kSliding
                                 ? 0
                                 : e["compress_rates"][e["layer_types"][i].get<std::string>()].get<int64_t>();
        EXPECT_EQ(m.compress_rate(int(i)), rate) << "layer " << i;
    }
    ASSERT_EQ(m.moe_types.size(), e["mlp_layer_types"].size());
    for (size_t i = 0; i < m.moe_types.size(); ++i)
        EXPECT_EQ(moe_type_name(m.moe_types[i]), e["mlp_layer_types"][i].get<std::string>()) << "layer " << i;
    EXPECT_EQ(m.csa_rate, e["compress_rates"]["compressed_sparse_attention"].get<int64_t>());
    EXPECT_EQ(m.hca_rate, e["compress_rates"]["heavily_compressed_attention"].get<int64_t>());

    EXPECT_EQ(m.torch_dtype, e["dtype"].is_null() ? "" : e["dtype"].get<std::string>());
    const json& q = e["quantization_config"];
    EXPECT_EQ(m.fp8_quantized, !q.is_null() && q["quant_method"] == "fp8");
    if (!q.is_null()) {
        EXPECT_EQ(m.scale_fmt, q["scale_fmt"].get<std::string>());
        EXPECT_EQ(m.weight_block_size, q["weight_block_size"].get<std::vector<int64_t>>());
    }
    // expert_dtype: as written; the FP8 loader reads a missing one as "fp8".
    const std::string expert =
        e["expert_dtype"].is_null() ? (m.fp8_quantized ? "fp8" : "") : e["expert_dtype"].get<std::string>();
    EXPECT_EQ(m.expert_dtype, expert);

    expect_table(e["rope_parameters"]["main"], m.rope_main, "main");
    expect_table(e["rope_parameters"]["compress"], m.rope_compress, "compress");
    expect_freqs(rope_freqs(m.rope_main, m.rope_dim, m.max_position_embeddings), e["tables"]["main"],
                 "main inv_freq", worst_ulp);
    expect_freqs(rope_freqs(m.rope_compress, m.rope_dim, m.max_position_embeddings), e["tables"]["compress"],
                 "compress inv_freq", worst_ulp);
}

TEST(ConfigVectors, MatchTransformers) {
    const json& v = vectors();
    ASSERT_EQ(v["transformers"], "5.17.0");
    ASSERT_GE(v["cases"].size(), 10u);
    int64_t worst = 0;
    for (const auto& c : v["cases"]) expect_case(c, &worst);
    std::printf("config vectors: %zu cases, worst inv_freq difference %lld ulp\n", v["cases"].size(),
                (long long)worst);
}

TEST(ConfigVectors, ErrorsNameTheField) {
    for (const auto& c : vectors()["error_cases"]) {
        const std::string name = c["name"];
        const std::string source = name + "/config.json";
        auto r = parse_config(c["config"].dump(), source);
        ASSERT_FALSE(r.ok()) << name << " parsed, but should fail (transformers: " << c["transformers"]
                             << ")";
        const std::string& msg = r.error().message;
        EXPECT_EQ(msg.rfind(source + ": ", 0), 0u) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        EXPECT_NE(msg.find(c["field"].get<std::string>()), std::string::npos) << name << ": " << msg;
    }
}

TEST(ConfigVectors, ReleasedFlashSchedule) {
    // Spec 1.3, independent of the vectors: layers 0-1 sliding, even 2..42 CSA, odd 3..41 HCA, 3 hash layers.
    const json& flash = vectors()["cases"][0];
    ASSERT_EQ(flash["name"], "flash");
    auto r = parse_config(flash["config"].dump(), "flash/config.json");
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->n_layers, 43);
    for (int i = 0; i < 43; ++i) {
        const AttnType want = i < 2 ? AttnType::kSliding : i % 2 == 0 ? AttnType::kCsa : AttnType::kHca;
        EXPECT_EQ(r->attn_types[size_t(i)], want) << i;
        EXPECT_EQ(r->moe_types[size_t(i)], i < 3 ? MoeType::kHash : MoeType::kScore) << i;
    }
    EXPECT_EQ(r->rope_dim, 64);
    EXPECT_TRUE(r->fp8_quantized);
    EXPECT_EQ(r->expert_dtype, "fp4");
    // Spec 3.3 published fp32 values of the compress table.
    const RopeFreqs f = rope_freqs(r->rope_compress, r->rope_dim, r->max_position_embeddings);
    const std::pair<int, float> published[] = {{0, 1.0f},          {1, 6.876560e-1f},  {2, 4.728708e-1f},
                                               {3, 3.251725e-1f},  {15, 3.635539e-3f}, {16, 2.265625e-3f},
                                               {24, 1.953125e-5f}, {25, 5.372313e-6f}, {31, 5.680529e-7f}};
    for (const auto& [i, v] : published) EXPECT_NEAR(f.inv_freq[size_t(i)], v, std::abs(v) * 2e-6) << i;
    EXPECT_EQ(f.mscale, 1.0f);
}

}  // namespace
}  // namespace di::model
