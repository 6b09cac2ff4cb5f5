#include "runtime/engine_sequence.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace di::runtime {
namespace {

SamplingParams to_params(const SamplingOptions& s) {
    SamplingParams p;
    p.temperature = s.temperature;
    p.top_k = s.top_k;
    p.top_p = s.top_p;
    p.min_p = s.min_p;
    p.repetition_penalty = s.repetition_penalty;
    p.presence_penalty = s.presence_penalty;
    p.frequency_penalty = s.frequency_penalty;
    p.seed = s.seed.value_or(0);
    p.logprobs = s.logprobs;
    p.top_logprobs = s.logprobs ? s.top_logprobs : 0;
    return p;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

EngineSequence::EngineSequence(uint64_t id, Request req, std::shared_ptr<RequestStream> stream,
                               const Tokenizer* tokenizer, std::vector<int32_t> stop_ids,
                               int64_t reserved_bytes, Clock::time_point deadline,
                               std::shared_ptr<const CompiledConstraint> constraint)
    : id_(id),
      req_(std::move(req)),
      stream_(std::move(stream)),
      tokens_(req_.prompt),
      n_prompt_(int64_t(req_.prompt.size())),
      reserved_bytes_(reserved_bytes),
      sampler_(to_params(req_.sampling)),
      matcher_(req_.stop.stop),
      token_stop_(std::move(stop_ids), req_.stop.max_tokens),
      submitted_(Clock::now()),
      last_token_(submitted_),
      deadline_(deadline) {
    DI_CHECK(req_.sampling.seed.has_value(), "request {} reached the engine without a seed", id);
    if (tokenizer) decoder_.emplace(*tokenizer, req_.stop.skip_special);
    tokens_.reserve(size_t(capacity()));
    if (constraint) {
        constraint_.emplace(std::move(constraint), std::vector<int32_t>(token_stop_.stop_ids().begin(),
                                                                        token_stop_.stop_ids().end()));
        constraint_active_ = req_.constraint.after_token < 0;
    }
}

std::span<const uint32_t> EngineSequence::constraint_mask() {
    if (!constraint_ || !constraint_active_) return {};
    constraint_->fill_mask(mask_);
    return mask_;
}

std::span<const int32_t> EngineSequence::tokens(int64_t start, int64_t n) const {
    DI_CHECK(start >= 0 && start + n <= int64_t(tokens_.size()),
             "request {}: chunk [{}, {}) beyond {} tokens", id_, start, start + n, tokens_.size());
    return std::span<const int32_t>(tokens_).subspan(size_t(start), size_t(n));
}

void EngineSequence::non_finite(int64_t index, float value) {
    finish(FinishReason::kError,
           fmt::format("the model produced a non-finite logit ({} for token id {}) at position {}: the "
                       "checkpoint's weights or a kernel are broken (try --check-weights)",
                       value, index, tokens_.size() - 1));
}

bool EngineSequence::greedy_pick() const {
    const SamplingParams& p = sampler_.params();
    if (finished()) return true;  // it takes no token: any pick will do
    return p.temperature <= 0.0f && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
           p.frequency_penalty == 0.0f && !p.logprobs && !constraint_ && n_generated_ >= req_.stop.min_tokens;
}

bool EngineSequence::settle_picks(const Pick& first, const Pick& second, StepMetrics& m) {
    const bool kept = first.bad < 0 && first.id == draft_;
    on_greedy_pick(first.id, first.bad, first.bad_value, m);
    if (kept) on_greedy_pick(second.id, second.bad, second.bad_value, m);
    on_draft_verified(kept);
    return kept;
}

bool EngineSequence::settle_draws(std::span<const float> first, std::span<const float> second,
                                  StepMetrics& m) {
    Draw d;
    // greedy (penalties, a mask): the draw itself, the draft kept where it is the draft
    if (sampler_.params().temperature <= 0.0f) {
        d = draw(first);
        d.kept_draft = !d.skip && d.bad < 0 && d.token.id == draft_;
    } else if (!finished()) {  // sampled: the draft kept with its probability under the same draw
        d.skip = false;
        if (const int64_t bad = first_non_finite(first); bad >= 0) {
            d.bad = bad, d.bad_value = first[size_t(bad)];
        } else {
            const std::span<const int32_t> all(tokens_);
            const auto [held, allowed] = draw_limits();
            d.token = sampler_.sample_draft(first, draft_, d.kept_draft, all, all.subspan(size_t(n_prompt_)),
                                            held, allowed);
        }
    }
    on_draw(d, m);  // the constraint's matcher takes the token before the second row's mask is made
    const bool kept = d.kept_draft && d.bad < 0;
    if (kept && !finished()) on_draw(draw(second), m);
    on_draft_verified(kept);
    return kept;
}

void EngineSequence::on_draft_verified(bool kept) {
    state_->undo(kept ? 0 : 1);
    kept_rate_ = kRateDecay * kept_rate_ + (1 - kRateDecay) * (kept ? 1.0 : 0.0);
    steps_since_verified_ = 0;
}

void EngineSequence::on_greedy_pick(int32_t id, int32_t bad, float bad_value, StepMetrics& m) {
    if (finished()) return;
    if (bad >= 0) return non_finite(bad, bad_value);
    SampledToken t;
    t.id = id;
    accept(t, m);
}

void EngineSequence::on_logits(std::span<const float> logits, StepMetrics& m) { on_draw(draw(logits), m); }

void EngineSequence::on_prompt_logits(int64_t start, int64_t n_rows, std::span<const float> rows) {
    if (finished()) return;
    DI_CHECK(n_rows > 0 && start >= 0 && start + n_rows <= n_prompt_ && rows.size() % size_t(n_rows) == 0,
             "request {}: {} logits for the prompt rows [{}, {})", id_, rows.size(), start, start + n_rows);
    const size_t V = rows.size() / size_t(n_rows);
    RequestEvent e;
    for (int64_t j = 0; j < n_rows && start + j + 1 < n_prompt_; ++j) {
        const std::span<const float> row = rows.subspan(size_t(j) * V, V);
        if (const int64_t bad = first_non_finite(row); bad >= 0) return non_finite(bad, row[size_t(bad)]);
        const SampledToken t = logprob_of(row, tokens_[size_t(start + j + 1)], req_.prompt_logprobs);
        e.prompt_logprobs.push_back(GeneratedToken{t.id, t.logprob, t.top, t.rank});
    }
    if (!e.prompt_logprobs.empty()) send(std::move(e));
}

EngineSequence::Draw EngineSequence::draw(std::span<const float> logits) {
    Draw d;
    if (finished() || score_only()) return d;  // score_only: on_draw ends it
    d.skip = false;
    if (const int64_t bad = first_non_finite(logits); bad >= 0) {
        d.bad = bad, d.bad_value = logits[size_t(bad)];
        return d;
    }
    const std::span<const int32_t> all(tokens_);
    const auto [held, allowed] = draw_limits();
    d.token = sampler_.sample(logits, all, all.subspan(size_t(n_prompt_)), held, allowed);
    return d;
}

std::pair<std::span<const int32_t>, std::span<const uint32_t>> EngineSequence::draw_limits() {
    const std::span<const uint32_t> allowed = constraint_mask();
    // Before min_tokens no stop token may end it, unless a complete constrained output leaves nothing else.
    std::span<const int32_t> held = held_back();
    if (!held.empty() && !allowed.empty()) {
        std::vector<uint32_t> rest(allowed.begin(), allowed.end());
        for (int32_t id : held) rest[size_t(id) / 32] &= ~(1u << (id % 32));
        if (std::none_of(rest.begin(), rest.end(), [](uint32_t w) { return w != 0; })) held = {};
    }
    return {held, allowed};
}

std::optional<std::vector<int32_t>> EngineSequence::candidate_extras() {
    if (finished()) return std::vector<int32_t>{};
    if (!constraint_mask().empty()) return std::nullopt;  // a mask bars most of the vocabulary: the whole row
    const std::span<const int32_t> all(tokens_);
    return sampler_.adjusted_ids(all, all.subspan(size_t(n_prompt_)), held_back());
}

std::optional<EngineSequence::Draw> EngineSequence::draw(const Candidates& c, int32_t bad,
                                                         std::span<const int32_t> adjusted,
                                                         std::span<const float> raw) {
    Draw d;
    if (finished()) return d;
    if (bad >= 0) return std::nullopt;  // the whole row names the value
    const std::span<const int32_t> all(tokens_);
    std::optional<SampledToken> t =
        sampler_.sample(c, all, all.subspan(size_t(n_prompt_)), held_back(), adjusted, raw);
    if (!t) return std::nullopt;
    d.skip = false;
    d.token = std::move(*t);
    return d;
}

std::span<const int32_t> EngineSequence::held_back() const {
    return n_generated_ < req_.stop.min_tokens ? token_stop_.stop_ids() : std::span<const int32_t>{};
}

void EngineSequence::on_draw(const Draw& d, StepMetrics& m) {
    if (score_only() && !finished()) return finish(FinishReason::kLength);  // its prompt is scored
    if (d.skip || finished()) return;
    if (d.bad >= 0) return non_finite(d.bad, d.bad_value);
    accept(d.token, m);
}

void EngineSequence::accept(const SampledToken& t, StepMetrics& m) {
    if (constraint_) {
        if (constraint_active_ && !constraint_->accept(t.id))
            return finish(FinishReason::kError,
                          fmt::format("structured output: token {} is not allowed by the constraint", t.id));
        if (!constraint_active_ && t.id == req_.constraint.after_token) constraint_active_ = true;
    }
    tokens_.push_back(t.id);
    ++n_generated_;
    const Clock::time_point now = Clock::now();
    if (n_generated_ == 1)
        m.ttft.push_back(seconds(now - submitted_));
    else
        m.itl.push_back(seconds(now - last_token_));
    last_token_ = now;
    ++m.generated;

    RequestEvent e;
    GeneratedToken g{t.id, 0, {}};
    if (req_.sampling.logprobs) {
        g.logprob = t.logprob;
        g.top = t.top;
    }
    e.tokens.push_back(std::move(g));
    const StopKind k = token_stop_.on_token(t.id, n_generated_);
    if (k == StopKind::kStopToken) {  // a stop token adds no text
        reason_ = FinishReason::kStop;
    } else if (decoder_) {
        auto piece = decoder_->push(t.id);
        DI_CHECK(piece.ok(), "request {}: sampled token {} outside the tokenizer: {}", id_, t.id,
                 piece.ok() ? "" : piece.error().message);
        auto matched = matcher_.push(*piece);
        e.text = std::move(matched.text);
        if (matched.stopped) reason_ = FinishReason::kStop;
    }
    if (reason_ == FinishReason::kNone && constraint_ && constraint_->terminated())
        reason_ = FinishReason::kStop;
    if (reason_ == FinishReason::kNone && k == StopKind::kLength) reason_ = FinishReason::kLength;
    if (reason_ != FinishReason::kNone) {
        e.finished = true;
        e.reason = reason_;
        if (decoder_ && !matcher_.stopped())
            e.text += matcher_.push(decoder_->finish()).text + matcher_.finish();
    }
    send(std::move(e));
}

void EngineSequence::finish(FinishReason reason, std::string error) {
    if (finished()) return;
    reason_ = reason;
    RequestEvent e;
    e.finished = true;
    e.reason = reason;
    e.error = std::move(error);
    send(std::move(e));
}

void EngineSequence::send(RequestEvent e) {
    e.prompt_tokens = n_prompt_;
    e.cached_tokens = cached_tokens_;
    e.completion_tokens = n_generated_;
    stream_->push(std::move(e));
}

}  // namespace di::runtime
