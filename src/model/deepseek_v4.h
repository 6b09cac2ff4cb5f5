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
#include "parallel/communicator.h"

namespace di::model {

class DeepseekV4 final : public Model {
  public:
    DeepseekV4(ModelConfig cfg, ModelWeights weights, ops::Backend& backend);

    const ModelConfig& config() const override { return cfg_; }
    const WeightStats& weight_stats() const override { return w_.stats; }
    const ModelWeights& weights() const { return w_; }
    ops::Backend& backend() override { return *be_; }
    Precision precision() const override { return precision_; }
    void set_precision(Precision p) override { precision_ = p; }
    StateSize state_size() const override { return deepseek_v4_state_size(cfg_); }
    size_t workspace_bytes() const override { return ws_.held() + vws_.held(); }
    std::unique_ptr<SequenceState> new_state(int64_t capacity) override;
    // Chunks' states must be this family's (DeepseekV4State).
    std::vector<float> forward(std::span<const SeqChunk> chunks) override;
    // The greedy pick on the backend (ops::Backend::argmax): only ids cross to the host.
    GreedyRows forward_greedy(std::span<const SeqChunk> chunks) override;
    // The candidates on the backend (ops::Backend::top_candidates): a few kilobytes a row cross to the host.
    CandidateRows forward_candidates(std::span<const SeqChunk> chunks, std::span<const float> temperatures,
                                     int64_t per_row) override;
    std::vector<float> step_logits_rows(std::span<const int64_t> rows) override;
    std::vector<float> step_logits_at(std::span<const int64_t> rows, std::span<const int32_t> ids) override;
    int64_t draft_tokens() const override { return w_.mtp ? cfg_.draft_tokens : 0; }
    // The checkpoint's MTP block over the kept rows of the last step (spec section 6; docs/speculative.md).
    std::vector<int32_t> draft(std::span<const DraftChunk> chunks) override;
    std::vector<float> draft_logits(std::span<const DraftChunk> chunks) override;
    // Expert parallelism with data-parallel attention (docs/parallel.md): this model is rank comm->rank() of
    // comm->size(), its weights bound with `experts` (bind_weights). Each rank steps its own sequences; each
    // MoE sends the tokens' rows to the ranks that hold their experts and gets the pairs' outputs back (see
    // routed_experts), so every rank must take part in every step: forward with its chunks, or idle_step.
    void set_expert_parallel(parallel::Communicator* comm, ExpertPartition experts);
    // A step without sequences of this rank's own: only the MoE exchanges, computing the experts of the
    // tokens the other ranks send.
    void idle_step();
    // The drafter's turn without sequences of this rank's own: its MoE's exchange only.
    void idle_draft();

  private:
    struct Step;       // per-step views (defined in the .cpp)
    struct Projected;  // a compressor's projections of the step's tokens
    // The linear's args, with fp8 activation blocks where the precision asks for them.
    ops::LinearArgs lin(const TensorView& x, const ops::QWeight& w, const TensorView& y) const;
    // The step's mHC collapse before a sub-layer, with that sub-layer's mixing weights.
    ops::MhcPreArgs mhc_pre_args(const HcWeights& hw, const Step& s) const;
    void routed_experts(ops::MoeArgs m, int64_t n);
    // Layer l's routed-expert args (experts, clamp, activation quantisation) over the given tensors.
    ops::MoeArgs moe_args(int l, const TensorView& x, const TensorView& ids, const TensorView& weights,
                          const TensorView& out) const;
    // Block l: a main layer, or the MTP block at l = n_layers.
    const LayerWeights& block(int l) const;
    AttnType attn_type(int l) const;
    void attention_layer(int l, Step& s);
    void ffn_layer(int l, Step& s);
    // Opens the step's next graph segment (ops::Backend::segment_begin); the ops that depend on positions,
    // entry counts or sequence state run between segments.
    void begin_segment(Step& s);
    // The step up to the head (and the greedy pick when s.greedy): its logits [rows, vocab] on the backend,
    // valid until the next step. The chunks' states advance after the caller's copy.
    TensorView run_step(std::span<const SeqChunk> chunks, Step& s);
    // The step's token and position uploads and its residual and mHC buffers (s.n rows, s.len set); the
    // linears' row groups become the step's.
    void take_step_buffers(Step& s, const std::vector<int32_t>& tokens,
                           const std::vector<int32_t>& positions);
    // The streams collapsed by a hyper head and normed: [s.n, hidden_dim].
    TensorView collapse_streams(const HcWeights& head, const TensorView& norm, const Step& s);
    // The residual streams' dtype: bf16 in the native precision (DeepSeek's inference code keeps them in the
    // model dtype, computing each update in f32) where the backend takes them, f32 otherwise.
    DType stream_dtype() const {
        return precision_ == Precision::kNative && be_->bf16_streams() ? DType::kBF16 : DType::kF32;
    }
    // The head's logits [rows.size(), vocab] of those rows of h (groups: their counts by sequence), and the
    // greedy pick of each logits row (i32 [2, rows]: the ids and the first non-finite indices).
    TensorView head_logits(const TensorView& h, std::span<const int64_t> rows,
                           std::span<const int64_t> groups);
    TensorView greedy_picks(const TensorView& logits);
    // The drafter over the last step's kept rows (deepseek_v4_draft.cpp): the guesses of the chunks that want
    // one, or with `logits` every kept row's logits [rows, vocab] on the host.
    std::vector<int32_t> run_draft(std::span<const DraftChunk> chunks, std::vector<float>* logits);
    // A compressor's projections of y: their buffers, and their two linears appended to `jobs` (the callers
    // give every projection of y to one linears() call, so a backend may read y once for all).
    Projected project(const CompressorWeights& cw, Step& s, const TensorView& y, int64_t width,
                      std::vector<ops::LinearArgs>& jobs);
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
    // The current step's rows by sequence (Step::len) for the linears and experts on its token rows
    // (ops::LinearArgs::row_groups), and their total.
    std::span<const int64_t> step_rows_;
    int64_t step_n_ = -1;
    TensorView step_logits_;  // forward_candidates' logits on the backend, until the next step
    // The last step's residual streams before the head [n, hc_mult, hidden_dim] (in ws_, valid until the
    // next step) and its chunks' first rows and states: the drafter's inputs.
    struct LastStep {
        TensorView streams;
        std::vector<int64_t> row0, len;
        std::vector<DeepseekV4State*> states;
    } last_;
    parallel::Communicator* comm_ = nullptr;
    ExpertPartition experts_;
};

}  // namespace di::model
