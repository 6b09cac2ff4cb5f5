// Loads a model directory (config.json + safetensors) onto a backend, in the family its config names.
#pragma once

#include <memory>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace di::runtime {

// check_weights: scan every float tensor for NaN/infinity first (`--check-weights`; one pass over the
// checkpoint's bytes). expert_ranks > 1: that many expert-parallel ranks in threads, rank 0 on `backend`
// and the others on backends of the same name (model/expert_parallel_model.h). draft_tokens > 0: the
// checkpoint's MTP block is loaded to draft that many tokens a step (speculative decoding,
// docs/speculative.md; model::ModelConfig::draft_tokens).
Result<std::unique_ptr<model::Model>> load_model(const std::string& dir, ops::Backend& backend,
                                                 bool check_weights = false, int expert_ranks = 1,
                                                 int draft_tokens = 0);

// The most tokens the drafter guesses a step (the MTP block drafts one: it predicts token i + 2).
inline constexpr int kMaxDraftTokens = 1;

// A model whose config text and tensors are already in memory (benchmark models drawn without a file);
// expert_ranks as load_model's.
Result<std::unique_ptr<model::Model>> load_model_in_memory(const std::string& config_json,
                                                           std::shared_ptr<io::Checkpoint> ckpt,
                                                           ops::Backend& backend, int expert_ranks = 1,
                                                           int draft_tokens = 0);

// "off" | "mtp" (EngineOptions::speculative, `--speculative`): the draft tokens a step for load_model.
Result<int> parse_speculative(std::string_view name);

// "exact" | "native" (model::Precision); anything else is a one-line error naming the value.
Result<model::Precision> parse_precision(std::string_view name);

// Checks token ids against the vocabulary: "token id 300 at index 4 is outside the vocabulary (256)".
Status check_tokens(const std::vector<int32_t>& tokens, int64_t vocab_size);

}  // namespace di::runtime
