// config.json -> ModelConfig, folded as transformers 5.17 DeepseekV4Config does (spec 1.2): legacy keys
// first, then the layer schedules, partial_rotary_factor and the RoPE tables (config_rope.cpp); then
// consistency checks.
#include "model/config.h"

#include <filesystem>

#include "io/json_text.h"
#include "io/mmap_file.h"
#include "model/config_fields.h"
#include "model/config_rope.h"

namespace di::model {
namespace {

using detail::ConfigFields;
using nlohmann::json;

constexpr const char* kCsa = "compressed_sparse_attention";
constexpr const char* kHca = "heavily_compressed_attention";
constexpr const char* kSliding = "sliding_attention";
constexpr int64_t kMaxLayers = 100000;

std::string known_architectures() {
    std::string s;
    for (const ArchitectureName& a : kArchitectures)
        s += fmt::format("{}{} or model_type {}", s.empty() ? "" : "; ", a.architecture, a.model_type);
    return s;
}

// A list field of strings (layer_types / mlp_layer_types); nullopt when absent or null.
Result<std::optional<std::vector<std::string>>> string_list(const ConfigFields& f, const char* key) {
    const json* v = f.find(key);
    if (v == nullptr || v->is_null()) return std::optional<std::vector<std::string>>();
    if (!v->is_array()) return f.type_error(key, "a list of strings", *v);
    std::vector<std::string> out;
    for (size_t i = 0; i < v->size(); ++i) {
        if (!(*v)[i].is_string())
            return f.error(key,
                           fmt::format("entry {} must be a string, got {}", i, io::describe_json((*v)[i])));
        out.push_back((*v)[i].get<std::string>());
    }
    return std::optional<std::vector<std::string>>(std::move(out));
}

// layer_types: explicit list > legacy compress_ratios (0/4/128 only) > 2x HCA then HCA/CSA alternating.
Status fold_layer_types(const ConfigFields& f, ModelConfig& cfg) {
    const int64_t n = cfg.n_layers;
    DI_TRY(std::optional<std::vector<std::string>> types, string_list(f, "layer_types"));
    const json* ratios = f.find("compress_ratios");
    if (!types && ratios != nullptr && !ratios->is_null()) {
        if (!ratios->is_array()) return f.type_error("compress_ratios", "a list of integers", *ratios);
        types.emplace();
        for (size_t i = 0; i < ratios->size(); ++i) {  // every entry is mapped, also the MTP one past N
            const json& r = (*ratios)[i];
            const double x = r.is_number() ? r.get<double>() : -1;
            if (!r.is_number() || (x != 0 && x != 4 && x != 128))
                return f.error("compress_ratios",
                               fmt::format("entry {} is {}; only 0, 4 and 128 are accepted (use "
                                           "layer_types + compress_rates for other rates)",
                                           i, io::describe_json(r)));
            types->push_back(x == 0 ? kSliding : x == 4 ? kCsa : kHca);
        }
    }
    if (!types) {
        types.emplace();
        for (int64_t i = 0; i < std::min<int64_t>(n, 2); ++i) types->push_back(kHca);
        for (int64_t i = 0; i < n - 2; ++i) types->push_back(i % 2 ? kCsa : kHca);
    }
    if (int64_t(types->size()) > n) types->resize(size_t(n));
    if (int64_t(types->size()) != n)
        return f.error(ratios && !f.find("layer_types") ? "compress_ratios" : "layer_types",
                       fmt::format("has {} entries, but num_hidden_layers is {}", types->size(), n));
    for (size_t i = 0; i < types->size(); ++i) {
        const std::string& t = (*types)[i];
        if (t == kSliding)
            cfg.attn_types.push_back(AttnType::kSliding);
        else if (t == kCsa)
            cfg.attn_types.push_back(AttnType::kCsa);
        else if (t == kHca)
            cfg.attn_types.push_back(AttnType::kHca);
        else
            return f.error("layer_types", fmt::format("entry {} is {}, expected {}, {} or {}", i,
                                                      io::quoted(t), kSliding, kCsa, kHca));
    }
    return ok_status();
}

// mlp_layer_types: explicit list > first num_hash_layers (default 3) hash_moe, the rest moe.
Status fold_mlp_types(const ConfigFields& f, ModelConfig& cfg) {
    const int64_t n = cfg.n_layers;
    DI_TRY(std::optional<std::vector<std::string>> types, string_list(f, "mlp_layer_types"));
    if (!types) {
        DI_TRY(std::optional<int64_t> n_hash, f.opt_integer("num_hash_layers"));
        const int64_t h = n_hash.value_or(3);
        if (h < 0) return f.error("num_hash_layers", fmt::format("must be >= 0, got {}", h));
        types.emplace();
        for (int64_t i = 0; i < n; ++i) types->push_back(i < h ? "hash_moe" : "moe");
    }
    if (int64_t(types->size()) > n) types->resize(size_t(n));
    if (int64_t(types->size()) != n)
        return f.error("mlp_layer_types",
                       fmt::format("has {} entries, but num_hidden_layers is {}", types->size(), n));
    for (size_t i = 0; i < types->size(); ++i) {
        const std::string& t = (*types)[i];
        if (t == "hash_moe")
            cfg.moe_types.push_back(MoeType::kHash);
        else if (t == "moe")
            cfg.moe_types.push_back(MoeType::kScore);
        else
            return f.error("mlp_layer_types",
                           fmt::format("entry {} is {}, expected hash_moe or moe", i, io::quoted(t)));
    }
    return ok_status();
}

// compress_rates dict (default {CSA: 4, HCA: 128}); legacy scalars compress_rate_csa / _hca override.
Status fold_compress_rates(const ConfigFields& f, ModelConfig& cfg) {
    const json* rates = f.find("compress_rates");
    json r = {{kCsa, 4}, {kHca, 128}};
    if (rates != nullptr && !rates->is_null()) {
        if (!rates->is_object()) return f.type_error("compress_rates", "an object", *rates);
        r = *rates;
    }
    for (const auto& [legacy, key] :
         {std::pair{"compress_rate_csa", kCsa}, std::pair{"compress_rate_hca", kHca}}) {
        DI_TRY(std::optional<int64_t> v, f.opt_integer(legacy));
        if (v) r[key] = *v;
    }
    for (const auto& [key, type, dst] :
         {std::tuple{kCsa, AttnType::kCsa, &cfg.csa_rate}, std::tuple{kHca, AttnType::kHca, &cfg.hca_rate}}) {
        const bool used =
            std::find(cfg.attn_types.begin(), cfg.attn_types.end(), type) != cfg.attn_types.end();
        if (!r.contains(key)) {
            if (used) return f.error("compress_rates", fmt::format("missing '{}'", key));
            continue;
        }
        const json& v = r[key];
        if (!v.is_number_integer() || v.get<int64_t>() <= 0)
            return f.error(std::string("compress_rates.") + key,
                           fmt::format("expected a positive integer, got {}", io::describe_json(v)));
        *dst = v.get<int64_t>();
    }
    return ok_status();
}

Status read_tokens(const ConfigFields& f, ModelConfig& cfg) {
    DI_TRY(std::optional<int64_t> bos, f.opt_integer("bos_token_id"));
    cfg.bos_token_id = f.find("bos_token_id") == nullptr ? 0 : bos.value_or(-1);
    DI_TRY(std::optional<int64_t> pad, f.opt_integer("pad_token_id"));
    (void)pad;
    const json* eos = f.find("eos_token_id");
    if (eos == nullptr) {
        cfg.eos_token_ids = {1};
    } else if (eos->is_array()) {
        for (const auto& e : *eos) {
            if (!e.is_number_integer())
                return f.type_error("eos_token_id", "an integer or a list of integers", *eos);
            cfg.eos_token_ids.push_back(e.get<int64_t>());
        }
    } else if (!eos->is_null()) {
        DI_TRY(std::optional<int64_t> one, f.opt_integer("eos_token_id"));
        cfg.eos_token_ids = {*one};
    }
    return ok_status();
}

Status read_storage(const ConfigFields& f, ModelConfig& cfg) {
    DI_TRY(std::optional<std::string> dtype, f.opt_string("dtype"));  // `dtype` wins over legacy torch_dtype
    DI_TRY(std::optional<std::string> torch_dtype, f.opt_string("torch_dtype"));
    cfg.torch_dtype = dtype.value_or(torch_dtype.value_or(""));
    const json* q = f.find("quantization_config");
    if (q != nullptr && !q->is_null()) {
        if (!q->is_object()) return f.type_error("quantization_config", "an object", *q);
        const ConfigFields qf(*q, f.source(), "quantization_config.");
        DI_TRY(std::string method, qf.string("quant_method", ""));
        if (method != "fp8")
            return qf.error("quant_method",
                            fmt::format("{} is not supported (expected 'fp8')", io::quoted(method)));
        cfg.fp8_quantized = true;
        DI_TRY(std::string fmt_name, qf.string("fmt", "e4m3"));
        if (fmt_name != "e4m3")
            return qf.error("fmt",
                            fmt::format("{} is not supported (expected 'e4m3')", io::quoted(fmt_name)));
        DI_TRY(cfg.scale_fmt, qf.string("scale_fmt", ""));
        if (const json* bs = qf.find("weight_block_size"); bs != nullptr && !bs->is_null()) {
            if (!bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() ||
                !(*bs)[1].is_number_integer() || (*bs)[0].get<int64_t>() <= 0 || (*bs)[1].get<int64_t>() <= 0)
                return qf.type_error("weight_block_size", "a list of 2 positive integers", *bs);
            cfg.weight_block_size = {(*bs)[0].get<int64_t>(), (*bs)[1].get<int64_t>()};
        }
    }
    DI_TRY(std::optional<std::string> expert, f.opt_string("expert_dtype"));
    if (expert && *expert != "fp4" && *expert != "fp8")
        return f.error("expert_dtype",
                       fmt::format("{} is not supported (expected 'fp4' or 'fp8')", io::quoted(*expert)));
    cfg.expert_dtype = expert.value_or(cfg.fp8_quantized ? "fp8" : "");  // the FP8 loader's default is fp8
    return ok_status();
}

// Fields transformers type-checks but the engine does not use: same strict types, values ignored.
Status check_unused_types(const ConfigFields& f) {
    for (const char* k :
         {"router_aux_loss_coef", "router_jitter_noise", "initializer_range", "attention_dropout"})
        DI_TRY_STATUS(f.real(k, 0.0));
    for (const char* k :
         {"norm_topk_prob", "output_router_logits", "use_cache", "attention_bias", "mlp_bias"})
        DI_TRY_STATUS(f.boolean(k, false));
    DI_TRY_STATUS(f.integer("num_key_value_heads", 1));
    return ok_status();
}

// Upper bounds on every size the kernels and allocations are computed from, so that a config that loads
// never overflows a byte count or asks for an absurd allocation later. Each is far above DeepSeek-V4-Pro
// (hidden 7168, vocab 129280, 384 experts, window 128, 1M positions).
Status check_bounds(const ConfigFields& f, const ModelConfig& c) {
    struct Bound {
        const char* field;
        int64_t value, lo, hi;
    };
    const Bound bounds[] = {
        {"vocab_size", c.vocab_size, 1, int64_t(1) << 24},
        {"hidden_size", c.hidden_dim, 1, int64_t(1) << 16},
        {"num_attention_heads", c.n_heads, 1, 1024},
        {"head_dim", c.head_dim, 1, int64_t(1) << 14},
        {"q_lora_rank", c.q_lora_rank, 1, int64_t(1) << 16},
        {"o_lora_rank", c.o_lora_rank, 1, int64_t(1) << 16},
        // The attention kernels keep window - 1 rows of cache besides the current tokens.
        {"sliding_window", c.window, 2, int64_t(1) << 16},
        {"index_n_heads", c.index_heads, 1, 1024},
        {"index_head_dim", c.index_dim, 1, int64_t(1) << 14},
        {"index_topk", c.index_topk, 1, int64_t(1) << 20},
        {"hc_mult", c.hc_mult, 1, 64},
        {"hc_sinkhorn_iters", c.hc_sinkhorn_iters, 1, 10000},
        {"n_routed_experts", c.n_experts, 1, 65536},
        {"moe_intermediate_size", c.moe_dim, 1, int64_t(1) << 16},
        {"n_shared_experts", c.n_shared_experts, 0, 64},
        {"num_nextn_predict_layers", c.n_mtp_layers, 0, kMaxLayers},
        {"max_position_embeddings", c.max_position_embeddings, 1, int64_t(1) << 32},
        {"compress_rates.compressed_sparse_attention", c.csa_rate, 1, int64_t(1) << 16},
        {"compress_rates.heavily_compressed_attention", c.hca_rate, 1, int64_t(1) << 16},
    };
    for (const Bound& b : bounds)
        if (b.value < b.lo || b.value > b.hi)
            return f.error(b.field,
                           fmt::format("{} is outside the supported range [{}, {}]", b.value, b.lo, b.hi));
    // Token ids the engine compares with sampled ids or feeds back: inside the vocabulary.
    if (c.bos_token_id < -1 || c.bos_token_id >= c.vocab_size)
        return f.error("bos_token_id",
                       fmt::format("{} is outside the vocabulary [0, {})", c.bos_token_id, c.vocab_size));
    for (const int64_t e : c.eos_token_ids)
        if (e < 0 || e >= c.vocab_size)
            return f.error("eos_token_id",
                           fmt::format("{} is outside the vocabulary [0, {})", e, c.vocab_size));
    return ok_status();
}

}  // namespace

Result<ArchitectureName> find_architecture(const json& obj, const std::string& source) {
    const ConfigFields f(obj, source);
    DI_TRY(std::optional<std::string> model_type, f.opt_string("model_type"));
    const json* archs = f.find("architectures");
    if (archs != nullptr && !archs->is_null()) {
        if (!archs->is_array()) return f.type_error("architectures", "a list of strings", *archs);
        for (const auto& a : *archs)
            if (!a.is_string()) return f.type_error("architectures", "a list of strings", *archs);
        for (const auto& a : *archs)
            for (const ArchitectureName& known : kArchitectures)
                if (a.get<std::string>() == known.architecture) return known;
    }
    if (model_type)
        for (const ArchitectureName& known : kArchitectures)
            if (*model_type == known.model_type) return known;
    return make_error(ErrorCode::kUnsupported,
                      "{}: unknown architecture: architectures {} with model_type {} (expected {})", source,
                      archs ? archs->dump() : "(absent)", model_type ? io::quoted(*model_type) : "(absent)",
                      known_architectures());
}

Result<ModelConfig> parse_config(const std::string& json_text, const std::string& source) {
    DI_TRY(json j, io::parse_json_text(json_text, source));
    if (!j.is_object())
        return make_error(ErrorCode::kFormat, "{}: expected a JSON object, got {}", source,
                          io::describe_json(j));
    DI_TRY(const ArchitectureName arch, find_architecture(j, source));
    // One architecture so far: the fold below is DeepseekV4Config's (spec 1.2).
    const ConfigFields f(j, source);
    ModelConfig c;
    c.architecture = std::string(arch.architecture);
    // Defaults are DeepseekV4Config's (spec 1.1).
    DI_TRY(c.vocab_size, f.positive("vocab_size", 129280));
    DI_TRY(c.hidden_dim, f.positive("hidden_size", 4096));
    DI_TRY(c.n_layers, f.positive("num_hidden_layers", 43));
    // Per-layer lists are built from this count: bound it so a corrupt file cannot exhaust memory.
    if (c.n_layers > kMaxLayers)
        return f.error("num_hidden_layers",
                       fmt::format("{} exceeds the supported maximum {}", c.n_layers, kMaxLayers));
    DI_TRY(c.n_heads, f.positive("num_attention_heads", 64));
    DI_TRY(c.head_dim, f.positive("head_dim", 512));
    DI_TRY(c.q_lora_rank, f.positive("q_lora_rank", 1024));
    DI_TRY(c.o_groups, f.positive("o_groups", 8));
    DI_TRY(c.o_lora_rank, f.positive("o_lora_rank", 1024));
    DI_TRY(c.window, f.positive("sliding_window", 128));
    DI_TRY(c.index_heads, f.positive("index_n_heads", 64));
    DI_TRY(c.index_dim, f.positive("index_head_dim", 128));
    DI_TRY(c.index_topk, f.positive("index_topk", 512));
    DI_TRY(c.hc_mult, f.positive("hc_mult", 4));
    DI_TRY(c.hc_sinkhorn_iters, f.positive("hc_sinkhorn_iters", 20));
    DI_TRY(c.hc_eps, f.real("hc_eps", 1e-6));
    DI_TRY(c.rms_norm_eps, f.real("rms_norm_eps", 1e-6));
    DI_TRY(c.n_experts, f.positive("n_routed_experts", 256));
    DI_TRY(c.n_experts_active, f.positive("num_experts_per_tok", 6));
    DI_TRY(c.n_shared_experts, f.integer("n_shared_experts", 1));  // HF always builds exactly one
    DI_TRY(c.moe_dim, f.positive("moe_intermediate_size", 2048));
    DI_TRY(c.routed_scaling_factor, f.real("routed_scaling_factor", 1.5));
    DI_TRY(c.swiglu_limit, f.real("swiglu_limit", 10.0));
    DI_TRY(c.max_position_embeddings, f.positive("max_position_embeddings", 1048576));
    DI_TRY(c.tie_word_embeddings, f.boolean("tie_word_embeddings", false));
    DI_TRY(c.n_mtp_layers, f.integer("num_nextn_predict_layers", 1));
    DI_TRY_STATUS(check_unused_types(f));
    for (const auto& [key, v] : {std::pair{"hc_eps", c.hc_eps}, std::pair{"rms_norm_eps", c.rms_norm_eps},
                                 std::pair{"swiglu_limit", c.swiglu_limit},
                                 std::pair{"routed_scaling_factor", c.routed_scaling_factor}})
        if (!(v > 0)) return f.error(key, fmt::format("must be > 0, got {}", v));
    if (c.n_shared_experts < 0)
        return f.error("n_shared_experts", fmt::format("must be >= 0, got {}", c.n_shared_experts));
    if (c.n_mtp_layers < 0)
        return f.error("num_nextn_predict_layers", fmt::format("must be >= 0, got {}", c.n_mtp_layers));

    DI_TRY(std::string scoring, f.string("scoring_func", "sqrtsoftplus"));
    if (scoring == "sqrtsoftplus")
        c.score_func = ScoreFunc::kSqrtSoftplus;
    else if (scoring == "sigmoid")
        c.score_func = ScoreFunc::kSigmoid;
    else
        return f.error("scoring_func", fmt::format("{} is not supported (expected sqrtsoftplus or sigmoid)",
                                                   io::quoted(scoring)));
    DI_TRY(std::string act, f.string("hidden_act", "silu"));
    if (act != "silu")
        return f.error("hidden_act", fmt::format("{} is not supported (expected silu)", io::quoted(act)));

    DI_TRY_STATUS(fold_layer_types(f, c));
    DI_TRY_STATUS(fold_mlp_types(f, c));
    DI_TRY_STATUS(fold_compress_rates(f, c));
    DI_TRY_STATUS(read_tokens(f, c));
    DI_TRY_STATUS(read_storage(f, c));

    // partial_rotary_factor: explicit > qk_rope_head_dim / head_dim > 64/512.
    detail::RopeFoldInputs rin;
    DI_TRY(rin.pf_explicit, f.opt_real("partial_rotary_factor"));
    DI_TRY(std::optional<double> qk_rope, f.opt_number("qk_rope_head_dim"));
    rin.pf = rin.pf_explicit ? *rin.pf_explicit : qk_rope ? *qk_rope / double(c.head_dim) : 64.0 / 512.0;
    const double rope_dims = double(c.head_dim) * rin.pf;  // int() truncation below, as in transformers
    const std::string pf_field = rin.pf_explicit || !qk_rope ? "partial_rotary_factor" : "qk_rope_head_dim";
    c.rope_dim = rope_dims >= 0 && rope_dims < double(c.head_dim) + 1 ? int64_t(rope_dims) : -1;
    if (c.rope_dim <= 0 || c.rope_dim % 2 != 0 || c.rope_dim > c.head_dim)
        return f.error(pf_field,
                       fmt::format("head_dim {} * partial_rotary_factor {} gives {} rotary dims; need an "
                                   "even number in [2, head_dim]",
                                   c.head_dim, rin.pf, rope_dims));
    if (c.rope_dim > c.index_dim)
        return f.error("index_head_dim",
                       fmt::format("{} is smaller than the {} rotary dims", c.index_dim, c.rope_dim));
    DI_TRY(rin.rope_theta, f.number("rope_theta", 10000.0));
    DI_TRY(rin.compress_rope_theta, f.number("compress_rope_theta", 160000.0));
    rin.head_dim = c.head_dim;
    rin.rope_dim = c.rope_dim;
    rin.max_position_embeddings = c.max_position_embeddings;
    DI_TRY_STATUS(detail::fold_rope(f, rin, c));

    if (c.n_heads % c.o_groups != 0)
        return f.error("o_groups", fmt::format("num_attention_heads {} is not divisible by o_groups {}",
                                               c.n_heads, c.o_groups));
    if (c.n_experts_active > c.n_experts)
        return f.error("num_experts_per_tok",
                       fmt::format("{} exceeds n_routed_experts {}", c.n_experts_active, c.n_experts));
    DI_TRY_STATUS(check_bounds(f, c));
    return c;
}

Result<ModelConfig> load_config(const std::string& model_dir) {
    const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
    DI_TRY(std::string text, io::read_text_file(path));
    return parse_config(text, path);
}

int64_t ModelConfig::compress_rate(int layer) const {
    switch (attn_types.at(size_t(layer))) {
        case AttnType::kSliding:
            return 0;
        case AttnType::kCsa:
            return csa_rate;
        case AttnType::kHca:
            return hca_rate;
    }
    return 0;
}

std::string_view attn_type_name(AttnType t) {
    switch (t) {
        case AttnType::kSliding:
            return kSliding;
        case AttnType::kCsa:
            return kCsa;
        case AttnType::kHca:
            return kHca;
    }
    return "?";
}

std::string_view moe_type_name(MoeType t) { return t == MoeType::kHash ? "hash_moe" : "moe"; }

}  // namespace di::model
