// Several expert-parallel ranks of one DeepSeek-V4 checkpoint as one Model (docs/parallel.md): rank r is a
// DeepseekV4 on its own backend holding its block of the routed experts. Attention is data-parallel: each
// sequence lives on one rank (its home, the rank with the least state memory in use when it starts), which
// runs its attention and dense layers; the MoE exchanges tokens between the ranks. A step runs on every rank
// at once (rank 0 on the caller's thread, the others on their own; a rank without sequences in the step
// still serves the others' tokens) and returns the logits of the chunks in their order. The engine,
// scheduler and server use it as any Model.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "io/safetensors.h"
#include "model/deepseek_v4.h"
#include "parallel/communicator.h"

namespace di::model {

class ExpertParallelModel final : public Model {
  public:
    // Rank r of comms.size() holds block r of the routed experts and runs on `backend` (r = 0) or on
    // make_backend(r); every rank's backend works in the memory its communicator sums (host memory for
    // threads as ranks, device memory for NCCL: rank r on GPU r).
    static Result<std::unique_ptr<Model>> load(
        ModelConfig cfg, std::shared_ptr<io::Checkpoint> ckpt, ops::Backend& backend,
        std::vector<std::unique_ptr<parallel::Communicator>> comms,
        const std::function<Result<std::unique_ptr<ops::Backend>>(int rank)>& make_backend);
    ~ExpertParallelModel() override;

    const ModelConfig& config() const override { return ranks_[0]->config(); }
    const WeightStats& weight_stats() const override { return ranks_[0]->weight_stats(); }
    ops::Backend& backend() override { return ranks_[0]->backend(); }
    Precision precision() const override { return ranks_[0]->precision(); }
    void set_precision(Precision p) override;
    StateSize state_size() const override;
    size_t workspace_bytes() const override {  // each rank's on its own device: the largest
        size_t most = 0;
        for (const auto& r : ranks_) most = std::max(most, r->workspace_bytes());
        return most;
    }
    // A state on the rank with the least state memory in use, or on rank `home`.
    std::unique_ptr<SequenceState> new_state(int64_t capacity) override;
    int state_homes() const override { return int(ranks_.size()); }
    std::unique_ptr<SequenceState> new_state_on(int64_t capacity, int home) override;
    std::vector<float> forward(std::span<const SeqChunk> chunks) override;
    GreedyRows forward_greedy(std::span<const SeqChunk> chunks) override;
    CandidateRows forward_candidates(std::span<const SeqChunk> chunks, std::span<const float> temperatures,
                                     int64_t per_row) override;
    std::vector<float> step_logits_rows(std::span<const int64_t> rows) override;
    std::vector<float> step_logits_at(std::span<const int64_t> rows, std::span<const int32_t> ids) override;
    int64_t draft_tokens() const override { return ranks_[0]->draft_tokens(); }
    // Each rank drafts for its own sequences; the drafter's MoE exchanges tokens on every rank.
    std::vector<int32_t> draft(std::span<const DraftChunk> chunks) override;
    std::vector<float> draft_logits(std::span<const DraftChunk> chunks) override;
    int ranks() const { return int(ranks_.size()); }

  private:
    ExpertParallelModel() = default;
    void worker(int rank);
    enum class Want : uint8_t { kLogits, kGreedy, kCandidates, kDraft, kDraftLogits };
    // Splits the chunks (and the candidates' temperatures) by home rank, runs the step on every rank and
    // waits for all of them; row_home_ then maps each logits row of the step to its rank and row there.
    void step(std::span<const SeqChunk> chunks, Want want, std::span<const float> temperatures = {});
    void run_rank(int rank);
    void run_all(Want want);  // every rank runs `want` (rank 0 on this thread); returns when all are done
    void split_drafts(std::span<const DraftChunk> chunks);  // by the last step's chunks' ranks

    std::vector<std::unique_ptr<ops::Backend>> backends_;  // ranks 1..
    std::vector<std::unique_ptr<parallel::Communicator>> comms_;
    std::vector<std::unique_ptr<DeepseekV4>> ranks_;
    // The step the workers run: each rank's chunks (their states the rank's part of each sequence's).
    std::mutex m_;
    std::condition_variable cv_;
    uint64_t step_ = 0;
    int pending_ = 0;
    bool stop_ = false;
    Want want_ = Want::kLogits;
    int64_t per_row_ = 0;
    std::vector<std::vector<SeqChunk>> rank_chunks_;  // the step's chunks of each rank, their parts' states
    std::vector<std::vector<float>> rank_temps_;      // and their logits rows' temperatures (kCandidates)
    std::vector<std::vector<float>> rank_logits_;     // each rank's result of the step
    std::vector<GreedyRows> rank_picks_;
    std::vector<CandidateRows> rank_cands_;
    std::vector<std::pair<int, int64_t>> row_home_;
    std::vector<int> chunk_home_;                       // the step's chunks' ranks
    std::vector<std::vector<DraftChunk>> rank_drafts_;  // the drafter's chunks of each rank, and its guesses
    std::vector<std::vector<int32_t>> rank_guesses_;
    std::shared_ptr<std::vector<int64_t>> load_;  // state bytes living on each rank (guarded by load_m_)
    std::shared_ptr<std::mutex> load_m_;
    std::vector<std::thread> threads_;
};

}  // namespace di::model
