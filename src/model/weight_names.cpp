#include "model/weight_names.h"

#include <regex>
#include <utility>

namespace di::model {
namespace {

// Official layer-local prefix -> transformers-internal equivalent (longest patterns first).
const std::vector<std::pair<std::string, std::string>> kInternalLayer = {
    {"attn.indexer.compressor.wkv.", "self_attn.compressor.indexer.kv_proj."},
    {"attn.indexer.compressor.wgate.", "self_attn.compressor.indexer.gate_proj."},
    {"attn.indexer.compressor.norm.", "self_attn.compressor.indexer.kv_norm."},
    {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"},
    {"attn.indexer.wq_b.", "self_attn.compressor.indexer.q_b_proj."},
    {"attn.indexer.weights_proj.", "self_attn.compressor.indexer.scorer.weights_proj."},
    {"attn.compressor.wkv.", "self_attn.compressor.kv_proj."},
    {"attn.compressor.wgate.", "self_attn.compressor.gate_proj."},
    {"attn.compressor.norm.", "self_attn.compressor.kv_norm."},
    {"attn.compressor.ape", "self_attn.compressor.position_bias"},
    {"attn.attn_sink", "self_attn.sinks"},
    {"attn.wq_a.", "self_attn.q_a_proj."},
    {"attn.q_norm.", "self_attn.q_a_norm."},
    {"attn.wq_b.", "self_attn.q_b_proj."},
    {"attn.wkv.", "self_attn.kv_proj."},
    {"attn.kv_norm.", "self_attn.kv_norm."},
    {"attn.wo_a.", "self_attn.o_a_proj."},
    {"attn.wo_b.", "self_attn.o_b_proj."},
    {"attn_norm.", "input_layernorm."},
    {"ffn_norm.", "post_attention_layernorm."},
    {"hc_attn_fn", "attn_hc.fn"},
    {"hc_attn_base", "attn_hc.base"},
    {"hc_attn_scale", "attn_hc.scale"},
    {"hc_ffn_fn", "ffn_hc.fn"},
    {"hc_ffn_base", "ffn_hc.base"},
    {"hc_ffn_scale", "ffn_hc.scale"},
    {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"},
    {"ffn.gate.", "mlp.gate."},
    {"ffn.shared_experts.w1.", "mlp.shared_experts.gate_proj."},
    {"ffn.shared_experts.w3.", "mlp.shared_experts.up_proj."},
    {"ffn.shared_experts.w2.", "mlp.shared_experts.down_proj."},
};

const std::vector<std::pair<std::string, std::string>> kInternalGlobal = {
    {"embed.weight", "model.embed_tokens.weight"}, {"head.weight", "lm_head.weight"},
    {"norm.weight", "model.norm.weight"},          {"hc_head_fn", "model.hc_head.hc_fn"},
    {"hc_head_base", "model.hc_head.hc_base"},     {"hc_head_scale", "model.hc_head.hc_scale"},
};

void add_unique(std::vector<std::string>& v, std::string s) {
    for (const auto& x : v)
        if (x == s) return;
    v.push_back(std::move(s));
}

}  // namespace

std::vector<std::string> candidate_names(const std::string& official) {
    std::vector<std::string> out{official};
    add_unique(out, "model." + official);
    // save_pretrained writes the main kv norm as attn.norm.
    static const std::regex kKvNorm(R"(^(layers\.\d+\.)attn\.kv_norm\.)");
    if (std::regex_search(official, kKvNorm))
        add_unique(out, "model." + std::regex_replace(official, kKvNorm, "$1attn.norm."));
    for (const auto& [from, to] : kInternalGlobal)
        if (official == from) {
            add_unique(out, to);
            if (from == "head.weight") add_unique(out, "model.head.weight");
        }
    static const std::regex kLayer(R"(^layers\.(\d+)\.(.*)$)");
    std::smatch m;
    if (std::regex_match(official, m, kLayer)) {
        const std::string rest = m[2];
        for (const auto& [from, to] : kInternalLayer)
            if (rest.rfind(from, 0) == 0) {
                add_unique(out, "model.layers." + std::string(m[1]) + "." + to + rest.substr(from.size()));
                break;
            }
    }
    return out;
}

bool is_ignored_tensor(const std::string& name) {
    return name.rfind("mtp.", 0) == 0 || name.rfind("model.mtp.", 0) == 0 ||
           name.find("rotary_emb") != std::string::npos;
}

}  // namespace di::model
