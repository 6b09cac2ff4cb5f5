// Single-sequence generation: prefill the prompt through the state (in chunks), then decode one token
// per step with a Sampler until EOS, the token limit, or the caller stops it.
#pragma once

#include <atomic>
#include <functional>
#include <vector>

#include "core/error.h"
#include "deepinfer/defaults.h"
#include "model/deepseek_v4.h"
#include "runtime/sampler.h"

namespace di::runtime {

struct GenerateOptions {
    int64_t max_new_tokens = 128;
    int64_t min_new_tokens = 0;        // EOS is suppressed until this many tokens exist
    SamplingParams sampling;
    std::vector<int32_t> eos_ids;      // generation ends after one of these (it is part of the output)
    int64_t prefill_chunk = kDefaultPrefillChunk;  // prompt tokens per forward step
    const std::atomic<bool>* cancel = nullptr;  // set from another thread (Ctrl-C) to stop early
};

enum class FinishReason { kLength, kEos, kStopped, kCancelled };
const char* finish_reason_name(FinishReason r);

struct GenerateResult {
    std::vector<int32_t> tokens;  // generated ids
    FinishReason finish = FinishReason::kLength;
    double prefill_seconds = 0, decode_seconds = 0;
};

// on_token(id) is called for every generated token; returning false stops generation (kStopped).
Result<GenerateResult> generate(model::DeepseekV4& model, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                const std::function<bool(const SampledToken&)>& on_token = {});

}  // namespace di::runtime
