// The embedded demo model: a small DeepSeek-V4-architecture model with deterministic random weights in the
// released checkpoint formats (BF16 embeddings, FP8 128x128 attention/shared experts, FP4 routed experts),
// paired with the real V4 tokenizer. Written once to a cache directory on first use, then loaded like any
// checkpoint. Its output is meaningless text: callers say so to the user.
#pragma once

#include <string>

#include "core/error.h"

namespace di::runtime {

// Directory of the demo checkpoint ($DEEPINFER_CACHE or ~/.cache/deepinfer, then demo-v4-<version>/),
// created if missing. Also holds tokenizer.json and tokenizer_config.json.
Result<std::string> ensure_demo_model();

inline constexpr const char* kDemoNotice =
    "note: no --model given, using the built-in demo model (DeepSeek-V4 architecture, RANDOM weights: "
    "the text it produces is meaningless)";

}  // namespace di::runtime
