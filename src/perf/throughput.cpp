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

Throughput measure_throughput(model::Model& model, int64_t n_prompt, int64_t n_decode, int64_t batch,
                              const std::function<void()>& after_prefill) {
    const auto& cfg = model.config();
    std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
    for (int64_t i = 0; i < n_prompt; ++i) prompt[size_t(i)] = int32_t((i * 7919 + 13) % cfg.vocab_size);
    std::vector<std::unique_ptr<model::SequenceState>> states;
    std::vector<model::SeqChunk> chunks;
    for (int64_t b = 0; b < batch; ++b) {
        states.push_back(model.new_state(n_prompt + n_decode));
        chunks.push_back({states.back().get(), prompt, false});
    }
    Throughput t{batch, n_prompt, n_decode};
    auto t0 = std::chrono::steady_clock::now();
    model::GreedyRows picks = model.forward_greedy(chunks);  // greedy per sequence: only ids cross
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
