#include "model/registry.h"

#include "core/check.h"
#include "model/deepseek_v4.h"
#include "model/seq_state.h"
#include "model/weights.h"

namespace di::model {
namespace {

Result<std::unique_ptr<Model>> load_deepseek_v4(ModelConfig cfg, std::shared_ptr<io::Checkpoint> ckpt,
                                                ops::Backend& backend) {
    DI_TRY(ModelWeights w, bind_weights(std::move(ckpt), cfg, backend));
    return std::unique_ptr<Model>(std::make_unique<DeepseekV4>(std::move(cfg), std::move(w), backend));
}

constexpr ModelFamily kFamilies[] = {
    {"DeepseekV4ForCausalLM", deepseek_v4_state_size, load_deepseek_v4},
};

}  // namespace

std::span<const ModelFamily> model_families() { return kFamilies; }

const ModelFamily& family_of(const ModelConfig& cfg) {
    for (const ModelFamily& fam : kFamilies)
        if (cfg.architecture == fam.architecture) return fam;
    DI_CHECK(false, "config of unknown architecture '{}' (configs come from parse_config)", cfg.architecture);
    return kFamilies[0];
}

StateSize state_size(const ModelConfig& cfg) { return family_of(cfg).state_size(cfg); }

}  // namespace di::model
