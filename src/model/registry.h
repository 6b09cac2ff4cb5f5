// The model families deepinfer runs, keyed by the architecture config.json names (model/config.h folds the
// config): how each sizes a sequence's state and binds a checkpoint into a Model. DeepSeek-V4 is the first
// entry; a new family adds its name to kArchitectures, its fold to parse_config, one entry here, and its own
// forward, state and weight binding beside deepseek_v4.*.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/model.h"
#include "model/state_size.h"
#include "ops/backend.h"

namespace di::model {

struct ModelFamily {
    std::string_view architecture;  // as in kArchitectures and ModelConfig::architecture
    StateSize (*state_size)(const ModelConfig& cfg);
    // Binds and checks every tensor of the checkpoint and places them on the backend's device.
    Result<std::unique_ptr<Model>> (*load)(ModelConfig cfg, std::shared_ptr<io::Checkpoint> ckpt,
                                           ops::Backend& backend);
};

std::span<const ModelFamily> model_families();

// The family of a folded config (its `architecture`; parse_config makes only known ones).
const ModelFamily& family_of(const ModelConfig& cfg);

// Bytes of one sequence's state in the config's family (admission, inspect and bench use this formula).
StateSize state_size(const ModelConfig& cfg);

}  // namespace di::model
