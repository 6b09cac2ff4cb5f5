#include "perf/throughput.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace di::perf {
namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

Result<int64_t> synthetic_context(const model::ModelConfig& cfg, int64_t tokens, int64_t n_prompt,
                                  int64_t n_decode) {
    int64_t rate = 1;
    for (int l = 0; l < int(cfg.n_layers); ++l) rate = std::max(rate, cfg.compress_rate(l));
    const int64_t context = (std::max<int64_t>(tokens, 0) + rate - 1) / rate * rate;
    if (cfg.max_position_embeddings > 0 && context + n_prompt + n_decode > cfg.max_position_embeddings)
        return make_error(ErrorCode::kInvalidArgument,
                          "--context {} + --prompt {} + --decode {} exceed the model's {} positions "
                          "(max_position_embeddings)",
                          context, n_prompt, n_decode, cfg.max_position_embeddings);
    return context;
}

Throughput measure_throughput(model::Model& model, int64_t n_prompt, int64_t n_decode, int64_t batch,
                              const std::function<void()>& after_prefill, int64_t context,
                              int64_t prefill_chunk) {
    const auto& cfg = model.config();
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (int64_t i = 0; i < n_prompt; ++i) prompt[size_t(i)] = int32_t((i * 7919 + 13) % cfg.vocab_size);
    std::vector<std::unique_ptr<model::SequenceState>> states;
    std::vector<model::SeqChunk> chunks(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
        states.push_back(model.new_state(context + n_prompt + n_decode));
        if (context > 0) states.back()->fill_synthetic(context, uint32_t(b + 1));
    }
    Throughput t{batch, n_prompt, n_decode, context};
    const int64_t step = prefill_chunk > 0 ? prefill_chunk : std::max<int64_t>(n_prompt, 1);
    auto t0 = std::chrono::steady_clock::now();
    model::GreedyRows picks;
    for (int64_t at = 0; at == 0 || at < n_prompt; at += step) {  // the prompt in steps of `step` tokens
        const auto part =
            std::span<const int32_t>(prompt).subspan(size_t(at), size_t(std::min(step, n_prompt - at)));
        for (int64_t b = 0; b < batch; ++b) chunks[size_t(b)] = {states[size_t(b)].get(), part, false};
        picks = model.forward_greedy(chunks);  // greedy per sequence: only ids cross
    }
    t.prefill_seconds = seconds_since(t0);
    if (after_prefill) after_prefill();
    std::vector<int32_t> next(static_cast<size_t>(batch));
    t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n_decode; ++i) {
        for (int64_t b = 0; b < batch; ++b) {
            next[size_t(b)] = picks.ids[size_t(b)];
            chunks[size_t(b)] = {states[size_t(b)].get(), std::span<const int32_t>(&next[size_t(b)], 1),
                                 false};
        }
        picks = model.forward_greedy(chunks);
    }
    t.decode_seconds = seconds_since(t0);
    return t;
}

}  // namespace di::perf
