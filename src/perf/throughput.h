// Throughput measurement shared by `deepinfer bench` and bench/model_bench: B sequences prefilled with one
// prompt of N tokens in one step, then D steps of B greedy single-token decodes; with a context of C tokens,
// each sequence first holds a synthetic state of C tokens (SequenceState::fill_synthetic: random contents,
// so a decode step reads what it reads at that context without a prefill of C tokens).
#pragma once

#include <cstdint>
#include <functional>

#include "core/error.h"
#include "model/model.h"

namespace di::perf {

struct Throughput {
    int64_t batch = 1, prompt_tokens = 0, decode_steps = 0, context = 0;
    double prefill_seconds = 0, decode_seconds = 0;
    double prefill_tokens_per_s() const { return double(batch * prompt_tokens) / prefill_seconds; }
    double decode_tokens_per_s() const { return double(batch * decode_steps) / decode_seconds; }
    double ms_per_step() const { return 1e3 * decode_seconds / double(decode_steps > 0 ? decode_steps : 1); }
};

// `after_prefill` (optional) runs between the prefill and the first decode step (a profiler's split);
// prefill_chunk > 0 prefills the prompt in steps of that many tokens (long prompts whose one-step workspace
// would not fit), else in one step.
Throughput measure_throughput(model::Model& model, int64_t n_prompt, int64_t n_decode, int64_t batch,
                              const std::function<void()>& after_prefill = {}, int64_t context = 0,
                              int64_t prefill_chunk = 0);

// The synthetic context nearest above `tokens` that the model can hold (a multiple of its largest
// compression rate), or an error naming --context where it and the prompt and decode steps after it
// exceed max_position_embeddings.
Result<int64_t> synthetic_context(const model::ModelConfig& cfg, int64_t tokens, int64_t n_prompt,
                                  int64_t n_decode);

}  // namespace di::perf
