#include "runtime/generator.h"

#include <algorithm>
#include <chrono>

namespace di::runtime {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kLength: return "length";
        case FinishReason::kEos: return "stop";
        case FinishReason::kStopped: return "stop";
        case FinishReason::kCancelled: return "cancelled";
    }
    return "?";
}

Result<GenerateResult> generate(model::DeepseekV4& m, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                const std::function<bool(const SampledToken&)>& on_token) {
    using clock = std::chrono::steady_clock;
    const auto& cfg = m.config();
    if (prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "empty prompt");
    if (o.max_new_tokens < 0 || o.min_new_tokens < 0)
        return make_error(ErrorCode::kInvalidArgument, "token limits must be >= 0 (max {}, min {})", o.max_new_tokens,
                          o.min_new_tokens);
    for (size_t i = 0; i < prompt.size(); ++i)
        if (prompt[i] < 0 || prompt[i] >= cfg.vocab_size)
            return make_error(ErrorCode::kOutOfRange, "token id {} at index {} is outside the vocabulary ({})",
                              prompt[i], i, cfg.vocab_size);
    const int64_t n_prompt = int64_t(prompt.size()), n_ctx = cfg.max_position_embeddings;
    if (n_prompt > n_ctx || o.max_new_tokens > n_ctx - n_prompt)  // a difference: the sum can overflow
        return make_error(ErrorCode::kOutOfRange,
                          "the prompt ({} tokens) plus max_new_tokens ({}) exceeds the model's context of {} tokens",
                          n_prompt, o.max_new_tokens, n_ctx);
    model::SeqState state(cfg, m.backend(), n_prompt + o.max_new_tokens);
    Sampler sampler(o.sampling);
    GenerateResult r;
    std::vector<int32_t> context = prompt;
    std::vector<float> logits;
    const auto t0 = clock::now();
    for (size_t i = 0; i < prompt.size(); i += size_t(o.prefill_chunk)) {
        const size_t len = std::min(prompt.size() - i, size_t(o.prefill_chunk));
        model::SeqChunk c{&state, std::span<const int32_t>(prompt.data() + i, len), false};
        logits = m.forward(std::span<const model::SeqChunk>(&c, 1));
    }
    const auto t1 = clock::now();
    r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
    while (int64_t(r.tokens.size()) < o.max_new_tokens) {
        if (o.cancel && o.cancel->load()) {
            r.finish = FinishReason::kCancelled;
            break;
        }
        if (const int64_t bad = first_non_finite(logits); bad >= 0)
            return make_error(ErrorCode::kFormat,
                              "the model produced a non-finite logit ({} for token id {}) at position {}: the "
                              "checkpoint's weights or a kernel are broken (try --check-weights)",
                              logits[size_t(bad)], bad, context.size() - 1);
        const bool hold_eos = int64_t(r.tokens.size()) < o.min_new_tokens;
        const SampledToken tok = sampler.sample(logits, context, r.tokens,
                                                hold_eos ? std::span<const int32_t>(o.eos_ids) : std::span<const int32_t>{});
        r.tokens.push_back(tok.id);
        context.push_back(tok.id);
        if (on_token && !on_token(tok)) {
            r.finish = FinishReason::kStopped;
            break;
        }
        if (std::find(o.eos_ids.begin(), o.eos_ids.end(), tok.id) != o.eos_ids.end()) {
            r.finish = FinishReason::kEos;
            break;
        }
        if (int64_t(r.tokens.size()) == o.max_new_tokens) break;
        model::SeqChunk c{&state, std::span<const int32_t>(&tok.id, 1), false};
        logits = m.forward(std::span<const model::SeqChunk>(&c, 1));
    }
    r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return r;
}

}  // namespace di::runtime
