// RoPE folding of a config.json into the two tables `main` and `compress` (spec 1.2 rule 6), as transformers
// 5.17 does it across convert_rope_params_to_dict, standardize_rope_params and
// DeepseekV4Config.__post_init__.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "model/config.h"
#include "model/config_fields.h"

namespace di::model::detail {

struct RopeFoldInputs {
    double rope_theta = 10000.0;            // top-level rope_theta (main base; nested sub-dict default)
    double compress_rope_theta = 160000.0;  // top-level compress_rope_theta (flat-style compress base)
    std::optional<double> pf_explicit;      // partial_rotary_factor as written in the file
    double pf = 0.125;                      // resolved partial_rotary_factor
    int64_t head_dim = 0;
    int64_t rope_dim = 0;  // int(head_dim * pf)
    int64_t max_position_embeddings = 0;
};

// Reads rope_scaling / rope_parameters from the top-level object `top` and fills cfg.rope_main/rope_compress.
Status fold_rope(const ConfigFields& top, const RopeFoldInputs& in, ModelConfig& cfg);

}  // namespace di::model::detail
