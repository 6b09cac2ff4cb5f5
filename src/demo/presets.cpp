#include "demo/presets.h"

namespace di::demo {

RandomModelSpec mid_spec() {
    RandomModelSpec s;
    s.vocab = 32768;
    s.hidden = 1024;
    s.heads = 8;
    s.head_dim = 512;
    s.q_lora = 512;
    s.o_groups = 4;
    s.o_lora = 512;
    s.index_heads = 16;
    s.index_dim = 128;
    s.index_topk = 512;
    s.experts = 32;
    s.active = 4;
    s.moe = 512;
    s.compress_ratios = {0, 4, 128, 4, 128, 4, 128, 4};
    return s;
}

RandomModelSpec flash_spec(int64_t n_layers) {
    RandomModelSpec s;
    s.vocab = 129280;
    s.hidden = 4096;
    s.heads = 64;
    s.head_dim = 512;
    s.q_lora = 1024;
    s.o_groups = 8;
    s.o_lora = 1024;
    s.index_heads = 64;
    s.index_dim = 128;
    s.index_topk = 512;
    s.experts = 256;
    s.active = 6;
    s.moe = 2048;
    s.compress_ratios.clear();
    for (int64_t l = 0; l < n_layers; ++l) s.compress_ratios.push_back(l < 2 ? 0 : l % 2 == 0 ? 4 : 128);
    s.fast_draws = true;
    return s;
}

Result<RandomModelSpec> preset_spec(std::string_view name, int64_t layers) {
    if (name == "mid") return mid_spec();
    if (name != "flash")
        return make_error(ErrorCode::kInvalidArgument, "preset '{}' is not one of mid, flash", name);
    if (layers < 1 || layers > 43)
        return make_error(ErrorCode::kInvalidArgument, "preset flash: {} layers (V4-Flash has 1 to 43)",
                          layers);
    return flash_spec(layers);
}

}  // namespace di::demo
