// ModelConfig: DeepSeek-V4 hyper-parameters under deepinfer's names, folded from a Hugging Face config.json
// exactly as transformers 5.17 folds them (legacy keys, layer schedules, the two RoPE tables and YaRN).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace di::model {

enum class AttnType : uint8_t { kSliding, kCsa, kHca };
enum class MoeType : uint8_t { kHash, kScore };
enum class ScoreFunc : uint8_t { kSqrtSoftplus, kSigmoid };

// One RoPE table (main or compress), resolved.
struct RopeTable {
    std::string type = "default";  // "default" | "yarn"
    double theta = 10000.0;
    double partial_rotary_factor = 0.125;
    // yarn only
    double factor = 1.0;
    double original_max_position = 0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    bool has_attention_factor = false;
    double attention_factor = 1.0;
    double mscale = 0, mscale_all_dim = 0;  // 0 = absent
    // `factor` was null in the file: YaRN then uses max_position_embeddings / original_max_position
    // (resolved by rope_freqs; `factor` holds 0 in that case).
    bool factor_from_positions = false;
};

struct ModelConfig {
    std::string architecture;  // "DeepseekV4ForCausalLM"
    int64_t vocab_size = 0;
    int64_t hidden_dim = 0;  // hidden_size
    int64_t n_layers = 0;    // num_hidden_layers
    int64_t n_heads = 0;     // num_attention_heads
    int64_t head_dim = 0;
    int64_t rope_dim = 0;  // int(head_dim * partial_rotary_factor)
    int64_t q_lora_rank = 0;
    int64_t o_groups = 0;
    int64_t o_lora_rank = 0;
    int64_t window = 0;      // sliding_window
    int64_t csa_rate = 4;    // compress_rates.compressed_sparse_attention
    int64_t hca_rate = 128;  // compress_rates.heavily_compressed_attention
    int64_t index_heads = 0;
    int64_t index_dim = 0;
    int64_t index_topk = 0;
    int64_t hc_mult = 0;
    int64_t hc_sinkhorn_iters = 20;
    double hc_eps = 1e-6;
    double rms_norm_eps = 1e-6;
    int64_t n_experts = 0;         // n_routed_experts
    int64_t n_experts_active = 0;  // num_experts_per_tok
    int64_t n_shared_experts = 1;
    int64_t moe_dim = 0;  // moe_intermediate_size
    ScoreFunc score_func = ScoreFunc::kSqrtSoftplus;
    double routed_scaling_factor = 1.0;
    double swiglu_limit = 0;  // always > 0 after parse_config (HF clamps unconditionally)
    int64_t max_position_embeddings = 0;
    int64_t bos_token_id = 0;  // -1 when null in config.json
    std::vector<int64_t> eos_token_ids;
    bool tie_word_embeddings = false;
    std::vector<AttnType> attn_types;  // n_layers
    std::vector<MoeType> moe_types;    // n_layers
    RopeTable rope_main;
    RopeTable rope_compress;
    // Checkpoint storage hints.
    std::string torch_dtype;     // "bfloat16", "float32", ...
    bool fp8_quantized = false;  // quantization_config.quant_method == "fp8"
    std::string expert_dtype;    // "fp4" | "fp8" | "" (dense)
    std::vector<int64_t>
        weight_block_size;     // quantization_config.weight_block_size [out, in], e.g. {128, 128}
    std::string scale_fmt;     // quantization_config.scale_fmt, e.g. "ue8m0" (scales stored as F8_E8M0)
    int64_t n_mtp_layers = 0;  // num_nextn_predict_layers
    // Not from config.json: the tokens the checkpoint's MTP block drafts a step for speculative decoding
    // (runtime::LoadOptions::draft_tokens; 0: the block is not loaded). The state then holds the block's
    // ring and what a rejected draft overwrites.
    int64_t draft_tokens = 0;

    int64_t compress_rate(int layer) const;  // 0 for sliding layers
};

// The architectures deepinfer reads: config.json names one in its "architectures" list, or by "model_type"
// when the list is absent. Each has a family in model/registry.h (its forward, state and weights).
struct ArchitectureName {
    std::string_view architecture, model_type;
};
inline constexpr ArchitectureName kArchitectures[] = {{"DeepseekV4ForCausalLM", "deepseek_v4"}};

// The kArchitectures entry config.json names; an unknown one is an error naming both fields and the known.
Result<ArchitectureName> find_architecture(const nlohmann::json& obj, const std::string& source);

// Parses config.json text, folded the way its architecture's config class folds it; `source` names the file
// in error messages.
Result<ModelConfig> parse_config(const std::string& json_text, const std::string& source);
Result<ModelConfig> load_config(const std::string& model_dir);

// inv_freq [rope_dim / 2] in f32 and the magnitude (attention_scaling), as transformers computes them.
struct RopeFreqs {
    std::vector<float> inv_freq;
    float mscale = 1.0f;
};
RopeFreqs rope_freqs(const RopeTable& t, int64_t rope_dim, int64_t max_position_embeddings);

std::string_view attn_type_name(AttnType t);
std::string_view moe_type_name(MoeType t);

}  // namespace di::model
