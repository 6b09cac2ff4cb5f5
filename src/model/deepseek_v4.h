// The DeepSeek-V4 forward pass, written once against ops::Backend. A step runs one chunk of tokens for
// each of several sequences: every chunk is appended to its sequence's state (full prefill, chunked
// prefill and decode are the same code), linears and MoE run batched over all tokens of the step.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/seq_state.h"
#include "model/weights.h"
#include "model/workspace.h"
#include "ops/backend.h"

namespace di::model {

struct SeqChunk {
    SeqState* state = nullptr;
    std::span<const int32_t> tokens;  // appended at positions state->n_tokens() ...
    bool all_logits = false;          // logits for every token, else only for the last one
};

// exact: f32 activations everywhere (held to the fp32 goldens). native: the GEMM inputs of FP8 weights
// quantised per 128-column block as DeepSeek's inference code does (ops/act_quant.h), so the CUDA backend can
// run them on FP8 tensor cores; an FP8 weight whose in_dim is not a multiple of 128 (test checkpoints only)
// keeps f32 inputs. Activations between ops stay f32 in both.
enum class Precision : uint8_t { kExact, kNative };

class DeepseekV4 {
  public:
    DeepseekV4(ModelConfig cfg, ModelWeights weights, ops::Backend& backend);

    const ModelConfig& config() const { return cfg_; }
    const ModelWeights& weights() const { return w_; }
    ops::Backend& backend() { return *be_; }
    Precision precision() const { return precision_; }
    void set_precision(Precision p) { precision_ = p; }

    // Runs one step. Returns host f32 logits [rows, vocab_size]: for each chunk in order, all of its tokens
    // or just its last. Token ids must be in range and chunks must fit their states (checked by callers).
    std::vector<float> forward(std::span<const SeqChunk> chunks);

  private:
    struct Step;       // per-step views (defined in the .cpp)
    struct Projected;  // a compressor's projections of the step's tokens
    // The linear's args, with fp8 activation blocks where the precision asks for them.
    ops::LinearArgs lin(const TensorView& x, const ops::QWeight& w, const TensorView& y) const;
    void attention_layer(int l, Step& s);
    void ffn_layer(int l, Step& s);
    // Opens the step's next graph segment (ops::Backend::segment_begin); the ops that depend on positions,
    // entry counts or sequence state run between segments.
    void begin_segment(Step& s);
    Projected project(const CompressorWeights& cw, Step& s, const TensorView& y, int64_t width);
    // Pools and stores compressed entries for every chunk; n_entries[c] = entries after the step.
    void compress_into(const CompressorWeights& cw, const Projected& p, int layer, bool index, Step& s,
                       int64_t rate, bool overlap, int64_t d, const ops::RopeArgs& rope_proto,
                       std::vector<int64_t>& n_entries);
    // i32 positions of compressed entries first .. first + count - 1 (entry i sits at i * rate), from a
    // device table kept per rate.
    TensorView entry_positions(int64_t rate, int64_t first, int64_t count);

    ModelConfig cfg_;
    ModelWeights w_;
    ops::Backend* be_;
    Workspace ws_;   // step-wide activations: their addresses are part of the graph segments' keys
    Workspace vws_;  // sizes that vary with the sequences (top-k picks), taken between segments
    int64_t id_;     // distinguishes models sharing a backend in the segments' keys
    std::map<int64_t, Tensor> entry_pos_;       // rate -> i32 [i * rate]
    Tensor inv_freq_main_, inv_freq_compress_;  // f32 [rope_dim / 2] on the device
    float mscale_main_ = 1.0f, mscale_compress_ = 1.0f;
    Precision precision_ = Precision::kExact;
};

}  // namespace di::model
