// What the runtime, the CLI and the benchmarks know of a model: one forward over per-sequence chunks, the
// per-sequence state it keeps and that state's size. The state's layout belongs to the model family (V4 keeps
// per-layer rings and compressed entries; a family whose compressed state is shared across layers lays it
// out its own way). Families are found by the config's architecture in model/registry.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/check.h"
#include "model/config.h"
#include "model/state_size.h"
#include "ops/backend.h"

namespace di::model {

// exact: f32 activations everywhere (held to the fp32 goldens). native: the GEMM inputs of FP8 weights
// quantised per 128-column block as DeepSeek's inference code does (ops/act_quant.h), so the CUDA backend can
// run them on FP8 tensor cores; an FP8 weight whose in_dim is not a multiple of 128 (test checkpoints only)
// keeps f32 inputs. Activations between ops stay f32 in both.
enum class Precision : uint8_t { kExact, kNative };

// One sequence's state, sized for `capacity` tokens when the model makes it (Model::new_state).
class SequenceState {
  public:
    virtual ~SequenceState() = default;
    int64_t n_tokens() const { return n_tokens_; }
    int64_t capacity() const { return capacity_; }
    int64_t bytes() const { return bytes_; }  // device memory it holds
    void advance(int64_t n) { n_tokens_ += n; }
    // Forget everything (the memory is reused by the next sequence).
    virtual void reset() = 0;
    // Makes this state what `from` is after its n_tokens() tokens (a prefix cache's snapshot, or restoring
    // one): bit for bit, so a sequence continued from the copy computes what `from`'s own would. Needs
    // capacity() >= from.n_tokens(); false where `from` is not this model's kind of state.
    virtual bool copy_from(const SequenceState& from) = 0;
    // Benchmarks only: the state a fresh sequence would have after n_tokens tokens (a multiple of every
    // compression rate), with random contents: a decode step then reads the bytes it reads at that context,
    // without a prefill of n_tokens first. Its outputs mean nothing.
    virtual void fill_synthetic(int64_t n_tokens, uint32_t seed) = 0;
    // Speculative decoding (Model::draft_tokens() > 0). Before a step whose chunk for this sequence is its
    // next token and then `drafts` drafted ones: keeps what the drafts' positions overwrite. After that
    // step (always, also with 0): takes back the last `rejected` tokens (<= drafts), as if they had never
    // been fed.
    virtual void prepare_undo(int64_t drafts);
    virtual void undo(int64_t rejected);

  protected:
    explicit SequenceState(int64_t capacity) : capacity_(capacity) {}
    int64_t n_tokens_ = 0;
    int64_t capacity_ = 0;
    int64_t bytes_ = 0;
};

struct SeqChunk {
    SequenceState* state = nullptr;   // made by the model that runs the chunk
    std::span<const int32_t> tokens;  // appended at positions state->n_tokens() ...
    bool all_logits = false;          // logits for every token, else only for the last one
};

// Speculative decoding's drafter, for one chunk of the step just run (Model::draft): the chunk's first
// next_tokens.size() rows were kept (any later ones taken back with SequenceState::undo), next_tokens are
// the tokens that follow those rows (the prompt's, or the ones just chosen), and `want` asks for a guess
// of the token after next_tokens.back().
struct DraftChunk {
    std::span<const int32_t> next_tokens;
    bool want = false;
};

struct WeightStats {
    std::map<std::string, int64_t> tensors_by_dtype;  // safetensors dtype -> count
    int64_t n_tensors = 0;
    int64_t bytes = 0;
    int64_t params = 0;           // logical parameters (fp4 counts two per byte; scales excluded)
    int64_t active_params = 0;    // per token: everything but the unselected routed experts
    int64_t skipped_tensors = 0;  // mtp.* and other ignored tensors
    int64_t skipped_mtp = 0;      // of those, the MTP block's (mtp.*: speculative decoding's drafter)
};

// The greedy pick of each logits row of a step (ops/elementwise.h's argmax rule: the first maximum), so a
// step whose every sequence decodes greedily moves token ids to the host instead of logits.
struct GreedyRows {
    std::vector<int32_t> ids;      // per logits row: the first index of its largest logit
    std::vector<int32_t> bad;      // per logits row: the index of its first non-finite logit, or -1
    std::vector<float> bad_value;  // per logits row: that logit (for the error message), or 0
};

// The sampling candidates of each logits row of a step (ops/sampling.h's top_candidates, computed where the
// logits are), so a step whose sequences sample moves a few kilobytes a row to the host.
struct CandidateRows {
    int64_t per_row = 0;        // C
    std::vector<int32_t> ids;   // [rows, C]: by logit descending, id ascending
    std::vector<float> logits;  // [rows, C]
    std::vector<double> sums;   // [rows, 3]: sum_1, sum_t, total_t
    std::vector<int32_t> bad;   // [rows]: the first non-finite index, or -1
    static CandidateRows sized(int64_t rows, int64_t per_row) {
        const size_t n = size_t(rows * per_row);
        return {per_row, std::vector<int32_t>(n), std::vector<float>(n),
                std::vector<double>(size_t(rows * 3)), std::vector<int32_t>(size_t(rows))};
    }
};

class Model {
  public:
    virtual ~Model() = default;
    virtual const ModelConfig& config() const = 0;
    virtual const WeightStats& weight_stats() const = 0;
    virtual ops::Backend& backend() = 0;
    virtual Precision precision() const = 0;
    virtual void set_precision(Precision p) = 0;
    virtual StateSize state_size() const = 0;
    // Bytes the model holds for its steps' activations now (its arenas' blocks; they grow to the largest
    // step seen), 0 where it does not say.
    virtual size_t workspace_bytes() const { return 0; }
    virtual std::unique_ptr<SequenceState> new_state(int64_t capacity) = 0;
    // Places a sequence's state can live, each with its own memory (an expert-parallel model's ranks), and
    // a state made in place `home` (< state_homes()): the engine's admission gives each place its share of
    // the state memory and chooses where each sequence lives.
    virtual int state_homes() const { return 1; }
    virtual std::unique_ptr<SequenceState> new_state_on(int64_t capacity, int home) {
        DI_CHECK(home == 0, "state home {} of a model with one", home);
        return new_state(capacity);
    }
    // Runs one step. Returns host f32 logits [rows, vocab_size]: for each chunk in order, all of its tokens
    // or just its last. Token ids must be in range and chunks must fit their states (checked by callers).
    virtual std::vector<float> forward(std::span<const SeqChunk> chunks) = 0;
    // The same step, returning the greedy pick of each of those logits rows; this default picks on the host.
    virtual GreedyRows forward_greedy(std::span<const SeqChunk> chunks);
    // The same step, returning the candidates of those logits rows, each for its temperature (one a row,
    // <= 0 for a row drawn greedily); the step's logits are kept until the next step for step_logits_rows.
    // This default computes them on the host from forward()'s logits.
    virtual CandidateRows forward_candidates(std::span<const SeqChunk> chunks,
                                             std::span<const float> temperatures, int64_t per_row);
    // Rows of the last forward_candidates step's logits [rows.size(), vocab] (the draws its candidates do not
    // reach).
    virtual std::vector<float> step_logits_rows(std::span<const int64_t> rows);
    // Single logits of that step: row rows[i], id ids[i] (what penalties change besides the candidates).
    virtual std::vector<float> step_logits_at(std::span<const int64_t> rows, std::span<const int32_t> ids);
    // Tokens a sequence may draft a step for speculative decoding (0: the model has no drafter loaded).
    virtual int64_t draft_tokens() const { return 0; }
    // After every step while draft_tokens() > 0 (the drafter follows each sequence's kept tokens), one entry
    // per chunk of that step: the drafter's greedy guess for each chunk that wants one, else -1.
    virtual std::vector<int32_t> draft(std::span<const DraftChunk> chunks);
    // The same drafter run, returning its logits of every kept row [rows, vocab] instead of guesses (tests
    // against a reference; the drafter then follows these rows as draft() would).
    virtual std::vector<float> draft_logits(std::span<const DraftChunk> chunks);

  private:
    std::vector<float> step_logits_;  // the default forward_candidates' logits
};

}  // namespace di::model
