// RoPE tables: folding the config's rope dicts (transformers 5.17 rules) and computing inv_freq / mscale with
// the same float/double steps as transformers' default and YaRN init functions (spec 3.3).
#include "model/config_rope.h"

#include <cmath>
#include <numbers>

#include "io/json_text.h"

namespace di::model {
namespace detail {
namespace {

using nlohmann::json;

void set_default(json& d, const char* key, const json& value) {
    if (!d.contains(key)) d[key] = value;
}

// rope types whose dict gets original_max_position_embeddings filled in by standardize_rope_params.
bool needs_original_max(const json& rope_type) {
    return rope_type.is_string() && (rope_type == "yarn" || rope_type == "llama3" || rope_type == "longrope");
}

// One folded sub-dict -> RopeTable, with the checks of validate_rope and of the init functions.
Result<RopeTable> to_table(const json& d, const std::string& label, const ConfigFields& top,
                           const RopeFoldInputs& in) {
    const ConfigFields f(d, top.source(), "rope_parameters." + label + ".");
    RopeTable t;
    DI_TRY(t.type, f.string("rope_type", "default"));
    if (t.type != "default" && t.type != "yarn")
        return f.error("rope_type",
                       fmt::format("{} is not supported (expected 'default' or 'yarn')", io::quoted(t.type)));
    const json* theta = f.find("rope_theta");
    if (theta == nullptr || !theta->is_number())
        return f.type_error("rope_theta", "a number", theta ? *theta : json());
    t.theta = theta->get<double>();
    // Both are used as f32 by the init functions: keep them finite there.
    constexpr double kMaxF32 = 3.0e38;
    if (!(t.theta > 1.0 && t.theta < kMaxF32))
        return f.error("rope_theta", fmt::format("must be in (1, 3e38), got {}", t.theta));
    DI_TRY(t.partial_rotary_factor, f.number("partial_rotary_factor", 1.0));  // the init functions' default
    const double dims = double(in.head_dim) * t.partial_rotary_factor;
    if (!(dims >= 0 && dims < double(in.head_dim) + 1) || int64_t(dims) != in.rope_dim)
        return f.error("partial_rotary_factor",
                       fmt::format("{} gives {} rotary dims for head_dim {}, but the model uses {} (write it "
                                   "explicitly in nested rope_parameters)",
                                   t.partial_rotary_factor, dims, in.head_dim, in.rope_dim));
    if (t.type == "default") return t;

    // YaRN: `factor` and `original_max_position_embeddings` are required keys
    // (validate_yarn_rope_parameters).
    if (f.find("factor") == nullptr) return f.error("factor", "missing (required for rope_type 'yarn')");
    DI_TRY(std::optional<double> factor, f.opt_number("factor"));
    t.factor_from_positions = !factor.has_value();
    t.factor = factor.value_or(0.0);
    if (factor && !(*factor > 0 && *factor < kMaxF32))
        return f.error("factor", fmt::format("must be in (0, 3e38), got {}", *factor));
    const json* l0 = f.find("original_max_position_embeddings");
    if (l0 == nullptr || !l0->is_number())
        return f.type_error("original_max_position_embeddings", "a number", l0 ? *l0 : json());
    t.original_max_position = l0->get<double>();
    if (!(t.original_max_position > 0))
        return f.error("original_max_position_embeddings",
                       fmt::format("must be > 0, got {}", t.original_max_position));
    DI_TRY(std::optional<double> beta_fast, f.opt_number("beta_fast"));
    DI_TRY(std::optional<double> beta_slow, f.opt_number("beta_slow"));
    // `get("beta_fast") or 32`: null and 0 both mean the default.
    t.beta_fast = beta_fast.value_or(0) != 0 ? *beta_fast : 32.0;
    t.beta_slow = beta_slow.value_or(0) != 0 ? *beta_slow : 1.0;
    if (!(t.beta_fast > 0) || !(t.beta_slow > 0))
        return f.error("beta_fast",
                       fmt::format("beta_fast {} and beta_slow {} must be > 0", t.beta_fast, t.beta_slow));
    DI_TRY(std::optional<double> af, f.opt_number("attention_factor"));
    t.has_attention_factor = af.has_value();
    t.attention_factor = af.value_or(1.0);
    DI_TRY(std::optional<double> ms, f.opt_number("mscale"));
    DI_TRY(std::optional<double> ms_all, f.opt_number("mscale_all_dim"));
    t.mscale = ms.value_or(0);
    t.mscale_all_dim = ms_all.value_or(0);
    return t;
}

}  // namespace

Status fold_rope(const ConfigFields& top, const RopeFoldInputs& in, ModelConfig& cfg) {
    // convert_rope_params_to_dict: a non-empty rope_scaling replaces rope_parameters.
    json rp = json::object();
    for (const char* key : {"rope_parameters", "rope_scaling"}) {
        const json* v = top.find(key);
        if (v == nullptr || v->is_null()) continue;
        if (!v->is_object()) return top.type_error(key, "an object or null", *v);
        if (!v->empty() || std::string(key) == "rope_parameters") rp = *v;
    }
    set_default(rp, "rope_theta", in.rope_theta);
    if (in.pf_explicit) set_default(rp, "partial_rotary_factor", *in.pf_explicit);

    json main, compress;
    if (!rp.contains("main") && !rp.contains("compress")) {
        // Flat (official) style: the whole dict describes `compress`; `main` is plain RoPE on rope_theta.
        set_default(rp, "rope_type", rp.contains("type") ? rp["type"] : json("default"));
        if (needs_original_max(rp["rope_type"]))
            set_default(rp, "original_max_position_embeddings", in.max_position_embeddings);
        main = {{"rope_type", "default"}, {"rope_theta", in.rope_theta}, {"partial_rotary_factor", in.pf}};
        compress = rp;
        compress["rope_theta"] = in.compress_rope_theta;
        compress["partial_rotary_factor"] = in.pf;
        // transformers forces attention_factor = 1.0 for a flat YaRN compress table (V4 does not rescale
        // cos/sin).
        if (compress["rope_type"] == "yarn") set_default(compress, "attention_factor", 1.0);
    } else {
        // Nested style: both sub-dicts are kept; defaults filled per sub-dict, no attention_factor injected.
        for (const char* label : {"main", "compress"}) {
            const json* sub = rp.contains(label) ? &rp[label] : nullptr;
            if (sub == nullptr || !sub->is_object())
                return top.error("rope_parameters",
                                 fmt::format("nested style needs objects 'main' and 'compress'; '{}' is {}",
                                             label, sub ? io::describe_json(*sub) : std::string("missing")));
            json d = *sub;
            set_default(d, "rope_type", d.contains("type") ? d["type"] : json("default"));
            set_default(d, "rope_theta", in.rope_theta);
            if (in.pf_explicit) set_default(d, "partial_rotary_factor", *in.pf_explicit);
            if (needs_original_max(d["rope_type"]))
                set_default(d, "original_max_position_embeddings", in.max_position_embeddings);
            (std::string(label) == "main" ? main : compress) = std::move(d);
        }
    }
    DI_TRY(cfg.rope_main, to_table(main, "main", top, in));
    DI_TRY(cfg.rope_compress, to_table(compress, "compress", top, in));
    return ok_status();
}

}  // namespace detail

namespace {
// transformers' get_mscale: 0.1 * mscale * ln(scale) + 1, or 1 for scale <= 1 (double precision).
double yarn_get_mscale(double scale, double mscale) {
    if (scale <= 1) return 1.0;
    return 0.1 * mscale * std::log(scale) + 1.0;
}

// find_correction_dim, in double as in Python.
double correction_dim(double n_rot, int64_t dim, double base, double max_pos) {
    return (double(dim) * std::log(max_pos / (n_rot * 2 * std::numbers::pi))) / (2 * std::log(base));
}
}  // namespace

// The products and sums below are separate f32 roundings, as torch performs them (one op per kernel);
// the blend below is kept unfused whatever the compiler flags.
RopeFreqs rope_freqs(const RopeTable& t, int64_t rope_dim, int64_t max_position_embeddings) {
    const int64_t half = rope_dim / 2;
    // pos_freqs = base ** (arange(0, dim, 2, f32) / dim): f32 exponent, f32 base. torch's vectorised powf
    // (Sleef, 1 ulp) may differ from this correctly rounded value by 1 ulp.
    const float base = float(t.theta);
    std::vector<float> pos(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        const float e = float(2 * i) / float(rope_dim);
        pos[size_t(i)] = float(std::pow(double(base), double(e)));
    }
    RopeFreqs out;
    out.inv_freq.resize(size_t(half));
    if (t.type != "yarn") {
        for (int64_t i = 0; i < half; ++i) out.inv_freq[size_t(i)] = 1.0f / pos[size_t(i)];
        out.mscale = 1.0f;
        return out;
    }
    const double factor =
        t.factor_from_positions ? double(max_position_embeddings) / t.original_max_position : t.factor;
    double attention = t.attention_factor;
    if (!t.has_attention_factor)
        attention = (t.mscale != 0 && t.mscale_all_dim != 0)
                        ? yarn_get_mscale(factor, t.mscale) / yarn_get_mscale(factor, t.mscale_all_dim)
                        : yarn_get_mscale(factor, 1.0);
    // Correction range, truncated (V4's top-level rope dict never carries `truncate`).
    double low = std::floor(correction_dim(t.beta_fast, rope_dim, t.theta, t.original_max_position));
    double high = std::ceil(correction_dim(t.beta_slow, rope_dim, t.theta, t.original_max_position));
    low = std::max(low, 0.0);
    high = std::min(high, double(rope_dim - 1));
    if (low == high) high += 0.001;
    const float span = float(high - low);
    const float low_f = float(low);
    const float factor_f = float(factor);
    for (int64_t i = 0; i < half; ++i) {
        const float p = pos[size_t(i)];
        const float extrap = 1.0f / p;
        const float interp = 1.0f / (factor_f * p);
        const float ramp = std::clamp((float(i) - low_f) / span, 0.0f, 1.0f);
        const float ef = 1.0f - ramp;  // extrapolation weight
        // volatile: each product is rounded to f32 on its own, never fused into an FMA with the sum.
        const volatile float a = interp * (1.0f - ef);
        const volatile float b = extrap * ef;
        out.inv_freq[size_t(i)] = a + b;
    }
    out.mscale = float(attention);
    return out;
}

}  // namespace di::model
