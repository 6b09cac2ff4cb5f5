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
    // Speculative decoding (ModelConfig::draft_tokens = k > 0), main layers: what a step's k draft
    // positions overwrite, kept by prepare_undo: their ring slots' rows and, in CSA layers, the overlaps.
    TensorView undo_ring;                       // f32 [k, head_dim]
    TensorView undo_comp_kv, undo_comp_gate;    // f32 [rate, head_dim] (comp.ovl_*)
    TensorView undo_index_kv, undo_index_gate;  // f32 [csa_rate, index_dim] (index.ovl_*)
};

StateSize deepseek_v4_state_size(const ModelConfig& cfg);

// With ModelConfig::draft_tokens > 0 the state also holds layer n_layers: the MTP block's ring (its own
// sliding window over the positions it has drafted from, mtp_tokens()).
class DeepseekV4State final : public SequenceState {
  public:
    DeepseekV4State(const ModelConfig& cfg, ops::Backend& backend, int64_t capacity);
    LayerState& layer(int i) { return layers_[size_t(i)]; }
    void reset() override;
    bool copy_from(const SequenceState& from) override;
    void fill_synthetic(int64_t n_tokens, uint32_t seed) override;
    void prepare_undo(int64_t drafts) override;
    void undo(int64_t rejected) override;
    // The draft positions of the step being run (prepare_undo's count; 0 after undo): the model then keeps
    // every token of the step in its compressor buffers' slots, also those of a window the step closes, so
    // that the window can close again after an undo.
    int64_t undo_pending() const { return undo_drafts_; }
    // Positions the MTP block has run over (its ring holds the last window - 1 of them).
    int64_t mtp_tokens() const { return mtp_tokens_; }
    void advance_mtp(int64_t n) { mtp_tokens_ += n; }

  private:
    std::vector<int64_t> rates_;  // per layer: its compression rate, 0 for sliding layers
    Tensor mem_;
    std::vector<LayerState> layers_;
    ops::Backend* backend_;
    int64_t window_ = 0, csa_rate_ = 0, n_main_ = 0;  // n_main_: layers before the MTP block's
    int64_t undo_drafts_ = 0, mtp_tokens_ = 0;
};

}  // namespace di::model
