// The embedded demo model: a small DeepSeek-V4-architecture model with deterministic random weights in the
// released checkpoint formats (BF16 embeddings, FP8 128x128 attention/shared experts, FP4 routed experts),
// paired with the real V4 tokenizer. Written once to a cache directory on first use, then loaded like any
// checkpoint. Its output is meaningless text: callers say so to the user.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"

namespace di::io {
class Checkpoint;
}

namespace di::demo {

// Shape of a random-weight V4 checkpoint (official names and formats). Defaults: the demo model.
struct RandomModelSpec {
    int64_t vocab = 129280, hidden = 256, heads = 4, head_dim = 128, q_lora = 128, o_groups = 2, o_lora = 128;
    int64_t index_heads = 4, index_dim = 64, index_topk = 64, experts = 16, active = 2, moe = 128;
    std::vector<int> compress_ratios = {0, 4, 128, 4};  // per layer: 0 sliding, 4 CSA, 128 HCA
    // Benchmark models: draw FP8/FP4 codes as random bits and BF16 from a uniform law (seconds instead of
    // minutes for V4-Flash-sized tensors). The demo model keeps normal draws.
    bool fast_draws = false;
    // The MTP block (`mtp.0.*`, a sliding-window block) for speculative decoding. The demo model has one.
    bool mtp = false;
};

// Writes config.json + model.safetensors of a deterministic random model into `dir`.
Status write_random_model(const std::string& dir, const RandomModelSpec& spec);

// The same model held in memory, for benchmarks of models larger than a disk: its FP8/FP4 weights are
// windows of two shared pools of random codes (each gets its own copy when bound to a device).
struct RandomModel {
    std::string config_json;
    std::shared_ptr<io::Checkpoint> checkpoint;
};
Result<RandomModel> random_model_in_memory(const RandomModelSpec& spec);

// Directory of the demo checkpoint ($DEEPINFER_CACHE or ~/.cache/deepinfer, then demo-v4-<version>/),
// created if missing. Also holds tokenizer.json and tokenizer_config.json.
Result<std::string> ensure_demo_model();

inline constexpr const char* kDemoNotice =
    "note: no --model given, using the built-in demo model (DeepSeek-V4 architecture, RANDOM weights: "
    "the text it produces is meaningless)";

}  // namespace di::demo
