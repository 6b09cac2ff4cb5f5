// One request inside the engine: its sequence state, sampler, detokenizer and stop checks. Turns each
// sampled token into a RequestEvent on the request's stream. Owned and used by the engine's loop thread only.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>

#include "deepinfer/engine.h"
#include "deepinfer/request.h"
#include "deepinfer/tokenizer.h"
#include "model/model.h"
#include "runtime/grammar.h"
#include "runtime/sampler.h"
#include "runtime/stop_conditions.h"

namespace di::runtime {

using Clock = std::chrono::steady_clock;

class EngineSequence {
  public:
    // constraint: the compiled OutputConstraint of the request (null when it has none).
    EngineSequence(uint64_t id, Request req, std::shared_ptr<RequestStream> stream,
                   const Tokenizer* tokenizer, std::vector<int32_t> stop_ids, int64_t reserved_bytes,
                   Clock::time_point deadline,
                   std::shared_ptr<const CompiledConstraint> constraint = nullptr);

    uint64_t id() const { return id_; }
    int64_t n_prompt() const { return n_prompt_; }
    std::span<const int32_t> prompt() const { return tokens(0, n_prompt_); }
    const std::string& cache_salt() const { return req_.cache_salt; }
    int prompt_logprobs() const { return req_.prompt_logprobs; }
    // Request::prompt_logprobs: the logits rows [n, vocab] of the prompt chunk [start, start + n) give the
    // logprobs of prompt tokens start + 1 .. start + n (those inside the prompt), sent as one event.
    void on_prompt_logits(int64_t start, int64_t n_rows, std::span<const float> rows);
    // PrefixCache::boundary_keys of the prompt, computed once (by the engine, under its lock).
    std::vector<uint64_t>& prefix_keys() { return prefix_keys_; }
    // Prompt tokens the state was restored with from the prefix cache (reported with every event).
    void set_cached_tokens(int64_t n) { cached_tokens_ = n; }
    int64_t capacity() const { return n_prompt_ + req_.stop.max_tokens; }
    // max_tokens 0 (with prompt_logprobs): it ends after its prompt, generating nothing.
    bool score_only() const { return req_.stop.max_tokens == 0; }
    int64_t reserved_bytes() const { return reserved_bytes_; }
    Clock::time_point deadline() const { return deadline_; }
    bool finished() const { return reason_ != FinishReason::kNone; }
    FinishReason reason() const { return reason_; }
    int64_t n_generated() const { return n_generated_; }
    RequestStream& stream() { return *stream_; }

    // Tokens to feed for the chunk [start, start + n): prompt positions, or the last sampled token.
    std::span<const int32_t> tokens(int64_t start, int64_t n) const;
    model::SequenceState* state() { return state_.get(); }
    void set_state(std::unique_ptr<model::SequenceState> s) { state_ = std::move(s); }
    int64_t state_bytes() const { return state_ ? state_->bytes() : 0; }

    // Samples the next token from `logits` [vocab] and sends it. Records TTFT/ITL in `m`.
    struct StepMetrics {
        std::vector<double> ttft, itl;
        uint64_t generated = 0;
    };
    void on_logits(std::span<const float> logits, StepMetrics& m);
    // on_logits in two halves, so the step can draw its sequences' tokens on several threads: draw() reads
    // this sequence's own state and advances only its own sampler (safe beside other sequences' draws), then
    // on_draw() sends the result (one thread, in the step's order).
    struct Draw {
        bool skip = true;  // finished: nothing to send
        SampledToken token;
        int64_t bad = -1;  // the first non-finite logit's index, or -1
        float bad_value = 0;
        bool kept_draft = false;  // settle_draws: the token is the draft
    };
    Draw draw(std::span<const float> logits);
    // What a draw from the row's candidates needs besides them: the ids whose logits penalties or held-back
    // stop ids change (empty: none), or nullopt where it needs the whole row (a grammar mask).
    std::optional<std::vector<int32_t>> candidate_extras();
    // The same draw from the row's candidates (the step's top_candidates; bad: the row's first non-finite
    // index, or -1) and the logits `raw` of candidate_extras()'s ids, or nullopt where it needs the whole
    // row: a non-finite logit (its value for the message) or a draw that reads past what the candidates
    // tell (the sampler is then unchanged).
    std::optional<Draw> draw(const Candidates& c, int32_t bad, std::span<const int32_t> adjusted,
                             std::span<const float> raw);
    // The temperature of this sequence's draws (top_candidates' sums are for it).
    float temperature() const { return sampler_.params().temperature; }
    void on_draw(const Draw& d, StepMetrics& m);
    // Whether the next token is the first maximum of the raw logits, whatever they are (greedy, no
    // penalties, no logprobs, no constraint, no stop token held back), or none (finished): the step may then
    // pick it on the device (model::Model::forward_greedy) and hand over only its id.
    bool greedy_pick() const;
    // The token forward_greedy picked (bad: the row's first non-finite logit's index, or -1, and its value).
    void on_greedy_pick(int32_t id, int32_t bad, float bad_value, StepMetrics& m);
    // Speculative decoding: the drafter's guess of the token after the last one (-1: none), and whether the
    // next step may verify it (two more tokens fit max_tokens).
    int32_t draft() const { return draft_; }
    void set_draft(int32_t id) { draft_ = id; }
    bool verifies_draft() const { return draft_ >= 0 && may_verify(); }
    // Whether its next step could verify a draft: decoding, and two more tokens fit max_tokens.
    bool may_verify() const {
        return !finished() && n_generated_ >= 1 && n_generated_ + 2 <= req_.stop.max_tokens;
    }
    // After each step: whether the drafter should guess for the next one. Not while the sequence's recent
    // rate of kept drafts is below kMinKeptRate, where verifying costs more than it gains, but for every
    // kProbeSteps-th step (to notice the rate rise again).
    bool wants_draft() {
        ++steps_since_verified_;
        return kept_rate_ >= kMinKeptRate || steps_since_verified_ >= kProbeSteps;
    }
    // A V4-Flash verify step reads ~1.30x a plain step's bytes at batch 1 (docs/speculative.md): below ~30%
    // kept, verifying loses. The rate starts at 1 and moves a fifth of the way to each outcome.
    static constexpr double kMinKeptRate = 0.35, kRateDecay = 0.8;
    static constexpr int kProbeSteps = 8;
    // A verify step's outcome (the chunk [next token, draft] fed after prepare_undo): sends the token or two
    // it gives, takes a draft not kept out of the state, and returns whether the draft was kept. Picks
    // (greedy_pick()): the picks of the chunk's two rows, the draft kept where the first row picks it. Draws:
    // the two rows' logits; the first row's draw (at temperature 0 the draw itself, penalties, mask and
    // all, the draft kept where it is the draft; above, Sampler::sample_draft, which keeps the row's
    // distribution), and where it keeps the draft, the second row's draw (its mask made after the first).
    struct Pick {
        int32_t id = 0, bad = -1;  // the pick, and the row's first non-finite logit's index or -1
        float bad_value = 0;
    };
    bool settle_picks(const Pick& first, const Pick& second, StepMetrics& m);
    bool settle_draws(std::span<const float> first, std::span<const float> second, StepMetrics& m);
    // Ends the request (no-op when already finished) and sends the final event.
    void finish(FinishReason reason, std::string error = {});

  private:
    void on_draft_verified(bool kept);           // the kept rate; the state's undo
    std::span<const int32_t> held_back() const;  // stop ids not yet allowed (before min_tokens)
    // A draw's barred ids (held-back stop ids) and mask (the constraint's allowed ids; empty: none).
    std::pair<std::span<const int32_t>, std::span<const uint32_t>> draw_limits();
    void send(RequestEvent e);
    // The sampled token t: constraint, stop checks, metrics, and the event sent.
    void accept(const SampledToken& t, StepMetrics& m);
    void non_finite(int64_t index, float value);
    // The mask of the tokens the constraint allows next, or empty (no constraint, or not active yet).
    std::span<const uint32_t> constraint_mask();

    uint64_t id_;
    Request req_;
    std::shared_ptr<RequestStream> stream_;
    std::vector<int32_t> tokens_;  // prompt + generated
    int64_t n_prompt_ = 0;
    int64_t cached_tokens_ = 0;
    std::vector<uint64_t> prefix_keys_;
    int64_t n_generated_ = 0;
    int64_t reserved_bytes_ = 0;
    std::unique_ptr<model::SequenceState> state_;
    Sampler sampler_;
    std::optional<StreamDecoder> decoder_;
    StopStringMatcher matcher_;
    std::optional<ConstraintMatcher> constraint_;
    bool constraint_active_ = false;  // after OutputConstraint::after_token, or from the start
    std::vector<uint32_t> mask_;
    TokenStopCheck token_stop_;
    Clock::time_point submitted_, last_token_, deadline_;
    FinishReason reason_ = FinishReason::kNone;
    int32_t draft_ = -1;
    double kept_rate_ = 1.0;
    int steps_since_verified_ = 0;
};

}  // namespace di::runtime
