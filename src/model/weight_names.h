// Checkpoint naming: the candidate names under which a tensor (given by its official DeepSeek name) may be
// stored: official, transformers save_pretrained (hybrid, "model." prefix) and transformers-internal names.
#pragma once

#include <string>
#include <vector>

namespace di::model {

std::vector<std::string> candidate_names(const std::string& official);

// True for tensors deepinfer deliberately ignores (the MTP block).
bool is_ignored_tensor(const std::string& name);

}  // namespace di::model
