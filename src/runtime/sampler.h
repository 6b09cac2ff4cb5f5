// Token sampling from one sequence's logits: penalties, temperature, top-k, top-p, min-p, seeded RNG.
// Each sequence owns its Sampler (and RNG), so its tokens never depend on other sequences in a batch.
// Temperature 0 is greedy (ties: lowest token id).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace di::runtime {

struct SamplingParams {
    float temperature = 1.0f;
    int top_k = 0;                    // 0 = off
    float top_p = 1.0f;               // 1 = off
    float min_p = 0.0f;               // 0 = off
    float repetition_penalty = 1.0f;  // transformers' rule: logit / p if > 0 else logit * p, on seen tokens
    float presence_penalty = 0.0f;    // OpenAI: - presence * [count > 0] on generated tokens
    float frequency_penalty = 0.0f;   // OpenAI: - frequency * count on generated tokens
    uint64_t seed = 0;
    bool logprobs = false;  // fill SampledToken::logprob (a pass over the vocabulary per token)
    int top_logprobs = 0;   // how many alternatives to report (0-20)
};

struct SampledToken {
    int32_t id = 0;
    float logprob =
        0;  // log-softmax of the raw logits (before penalties and temperature); 0 unless asked for
    std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, best first
    int32_t rank = 0;                            // logprob_of: 1 + the ids ranked above it
};

// `id` with its log-softmax under the raw logits, and the `top` most likely ids with theirs (by logit
// descending, id ascending), and its rank in that order: what a sampled token reports, and a prompt token
// (Request::prompt_logprobs).
SampledToken logprob_of(std::span<const float> logits, int32_t id, int top);

// One logits row's sampling candidates (ops/sampling.h's top_candidates, computed where the logits are): its
// best ids by (logit descending, id ascending) with their logits, and its sums over the whole row.
struct Candidates {
    std::span<const int32_t> ids;
    std::span<const float> logits;
    double sum_1 = 0, sum_t = 0, total_t = 0;  // the op's sums for this row's temperature
    int64_t vocab = 0;
};

// Index of the first NaN or infinite logit, or -1. A broken checkpoint or kernel shows up here: sampling
// from such a row would return an arbitrary token, so every caller stops with an error instead.
int64_t first_non_finite(std::span<const float> logits);

class Sampler {
  public:
    explicit Sampler(const SamplingParams& p);
    // logits: [vocab]. context: prompt + generated ids (repetition penalty); generated: generated ids only
    // (presence/frequency penalties). suppressed: ids that must not be sampled (e.g. EOS before min tokens).
    // allowed: when not empty, a bitmask over the vocabulary (bit v % 32 of word v / 32): only those ids
    // may be sampled (structured output); logprobs stay those of the raw logits.
    SampledToken sample(std::span<const float> logits, std::span<const int32_t> context,
                        std::span<const int32_t> generated, std::span<const int32_t> suppressed = {},
                        std::span<const uint32_t> allowed = {});
    // The same draw from a row's candidates (no mask): the token sample() gives on the full row, or nullopt
    // where the draw reads past what the candidates tell (then this sampler is as before the call: sample()
    // the full row). Without penalties and suppressed ids the draw is the full row's bit for bit. With them,
    // `adjusted` = adjusted_ids(...) and `raw` their logits: the ranking is then known down to the last
    // candidate, and the sum over every id is the candidates' sum corrected for the adjusted ids (equal to
    // the full row's but for rounding, so a draw can differ only within rounding of a boundary).
    std::optional<SampledToken> sample(const Candidates& c, std::span<const int32_t> context = {},
                                       std::span<const int32_t> generated = {},
                                       std::span<const int32_t> suppressed = {},
                                       std::span<const int32_t> adjusted = {},
                                       std::span<const float> raw = {});
    // The ids whose logits the penalties or the suppressed list change (sorted, distinct; empty when neither
    // applies): what sample(Candidates, ...) needs besides the candidates.
    std::vector<int32_t> adjusted_ids(std::span<const int32_t> context, std::span<const int32_t> generated,
                                      std::span<const int32_t> suppressed) const;
    // Speculative sampling (docs/speculative.md), temperature > 0: the token for `logits` (the same
    // arguments as sample()) drawn so that the guess `draft` comes out with its probability under sample()'s
    // distribution (one uniform; `kept` then set) and every other id with its own (a second uniform over the
    // rest). The distribution is sample()'s; the draws are not, so a seeded sequence's tokens differ from
    // those without drafts.
    SampledToken sample_draft(std::span<const float> logits, int32_t draft, bool& kept,
                              std::span<const int32_t> context, std::span<const int32_t> generated,
                              std::span<const int32_t> suppressed = {},
                              std::span<const uint32_t> allowed = {});
    const SamplingParams& params() const { return p_; }

  private:
    double uniform();  // [0, 1), identical on every platform for a given seed
    // temperature > 0: the sampled id (with a draft: speculative sampling, *kept_draft set where it is kept)
    int32_t draw(const std::vector<double>& z, int32_t draft = -1, bool* kept_draft = nullptr);
    // The logits as z after the penalties, with suppressed and disallowed ids at -inf (a per-thread buffer).
    std::vector<double>& adjusted_row(std::span<const float> logits, std::span<const int32_t> context,
                                      std::span<const int32_t> generated, std::span<const int32_t> suppressed,
                                      std::span<const uint32_t> allowed) const;
    // The penalties' rules, for the full row and the candidates alike: a seen id's logit (repetition), and
    // what a generated id's logit loses for `count` occurrences (presence + frequency, in float as given).
    double repeated(double z) const { return z > 0 ? z / p_.repetition_penalty : z * p_.repetition_penalty; }
    float occurrence_penalty(int count) const { return p_.presence_penalty + p_.frequency_penalty * count; }
    void finish_logprobs(SampledToken& out, std::span<const float> logits) const;  // when asked for
    SamplingParams p_;
    std::mt19937_64 rng_;
};

}  // namespace di::runtime
