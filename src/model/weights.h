// ModelWeights: every tensor of a DeepSeek-V4 checkpoint bound to its place in the model, as views on the
// backend's device. Accepts the official DeepSeek names, the names transformers' save_pretrained writes and
// transformers' internal names; FP8/FP4 stay packed (ops::QWeight). Checkpoint key names live only here.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/expert_partition.h"
#include "model/model.h"
#include "ops/backend.h"

namespace di::model {

struct CompressorWeights {
    ops::QWeight wkv;    // [width, hidden_dim], width = d (HCA) or 2d (CSA)
    ops::QWeight wgate;  // [width, hidden_dim]
    TensorView ape;      // f32 [rate, width] position bias
    TensorView norm;     // [d]
};

struct AttentionWeights {
    ops::QWeight wq_a;                   // [q_lora_rank, hidden_dim]
    TensorView q_norm;                   // [q_lora_rank]
    ops::QWeight wq_b;                   // [n_heads * head_dim, q_lora_rank]
    ops::QWeight wkv;                    // [head_dim, hidden_dim]
    TensorView kv_norm;                  // [head_dim]
    ops::QWeight wo_a;                   // [o_groups * o_lora_rank, n_heads * head_dim / o_groups]
    ops::QWeight wo_b;                   // [hidden_dim, o_groups * o_lora_rank]
    TensorView sinks;                    // f32 [n_heads]
    CompressorWeights compressor;        // CSA and HCA layers
    CompressorWeights index_compressor;  // CSA layers
    ops::QWeight index_wq_b;             // [index_heads * index_dim, q_lora_rank]
    ops::QWeight index_weights_proj;     // [index_heads, hidden_dim]
};

struct FfnWeights {
    ops::QWeight gate;     // router [n_experts, hidden_dim]
    TensorView gate_bias;  // f32 [n_experts] (score-routed)
    TensorView tid2eid;    // i64|i32 [vocab_size, n_experts_active] (hash-routed)
    std::vector<ops::ExpertWeights> experts;
    ops::ExpertWeights shared;
};

struct HcWeights {
    TensorView fn;     // f32 [mix, hc_mult * hidden_dim]
    TensorView base;   // f32 [mix]
    TensorView scale;  // f32 [3] (or [1] for the head)
};

struct LayerWeights {
    TensorView attn_norm, ffn_norm;  // [hidden_dim]
    HcWeights hc_attn, hc_ffn;
    AttentionWeights attn;
    FfnWeights ffn;
};

// The checkpoint's multi-token-prediction block (spec section 6, `mtp.0.*`): from the main model's last
// streams at position i and the embedding of token i + 1 it predicts token i + 2 through one more block
// (sliding-window attention, score-routed MoE), its own hc head and norm, and the main model's head.
struct MtpWeights {
    ops::QWeight e_proj, h_proj;    // [hidden_dim, hidden_dim]
    TensorView enorm, hnorm, norm;  // [hidden_dim]
    HcWeights hc_head;
    LayerWeights block;
};

struct ModelWeights {
    TensorView embed;   // [vocab_size, hidden_dim]
    ops::QWeight head;  // [vocab_size, hidden_dim]
    TensorView norm;    // [hidden_dim]
    HcWeights hc_head;
    std::vector<LayerWeights> layers;
    std::optional<MtpWeights> mtp;  // bound where ModelConfig::draft_tokens > 0
    WeightStats stats;

    std::shared_ptr<io::Checkpoint> checkpoint;  // keeps the mmap alive for host views
    std::vector<Tensor> owned;                   // uploaded or converted tensors
};

// Binds and validates every tensor (names, shapes, dtypes, no missing or unexpected tensors) and places
// them on `backend`'s device; of the routed experts only those `experts` gives this rank (the others are
// validated and left empty: nothing of them is read or copied). The MTP block is bound where
// cfg.draft_tokens > 0 (a missing tensor of it is an error), else its tensors are skipped.
Result<ModelWeights> bind_weights(std::shared_ptr<io::Checkpoint> ckpt, const ModelConfig& cfg,
                                  ops::Backend& backend, const ExpertPartition& experts = {});

}  // namespace di::model
