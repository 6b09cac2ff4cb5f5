// Per-sequence state of DeepSeek-V4 (spec section 7): per layer the sliding-window K=V ring (window - 1
// rows), and for compressed layers the open-window compressor buffers, the CSA overlap, the compressed
// entries and, for CSA, the same four items of the lightning indexer. One allocation per sequence, sized
// for `capacity` tokens: fixed bytes + capacity / rate entries, never O(capacity) full KV.
#pragma once

#include <vector>

#include "model/config.h"
#include "model/model.h"
#include "model/state_size.h"
#include "ops/backend.h"

namespace di::model {

struct CompressorState {
    TensorView buf_kv, buf_gate;  // f32 [rate, width]
    TensorView ovl_kv, ovl_gate;  // f32 [rate, d] (CSA only)
    TensorView entries;           // f32 [capacity / rate, d]
};

struct LayerState {
    TensorView ring;        // f32 [window - 1, head_dim]
    CompressorState comp;   // CSA, HCA
    CompressorState index;  // CSA
};

StateSize deepseek_v4_state_size(const ModelConfig& cfg);

class DeepseekV4State final : public SequenceState {
  public:
    DeepseekV4State(const ModelConfig& cfg, ops::Backend& backend, int64_t capacity);
    LayerState& layer(int i) { return layers_[size_t(i)]; }
    void reset() override;
    bool copy_from(const SequenceState& from) override;
    void fill_synthetic(int64_t n_tokens, uint32_t seed) override;

  private:
    std::vector<int64_t> rates_;  // per layer: its compression rate, 0 for sliding layers
    Tensor mem_;
    std::vector<LayerState> layers_;
    ops::Backend* backend_;
};

}  // namespace di::model
