// Admission arithmetic, on numbers straight from requests: whether prompt + max_tokens fits the context
// and how many bytes of sequence state the request reserves. Written so that no int64 input can overflow
// (the sum is checked as a difference, the byte count saturates), and fuzzed (tests/fuzz/fuzz_admission).
#pragma once

#include <cstdint>

#include "core/error.h"

namespace di::runtime {

struct AdmissionLimits {
    int64_t max_context = 0;     // prompt + max_tokens limit
    int64_t model_context = 0;   // the model's own (max_position_embeddings); names the limit in errors
    int64_t fixed_bytes = 0;     // state bytes independent of length
    double bytes_per_token = 0;  // per token of capacity (amortised compressed entries)
};

// State bytes for `capacity` tokens (prompt + max_tokens), rounded up; INT64_MAX when it would not fit.
int64_t state_bytes(const AdmissionLimits& l, int64_t capacity);

// kInvalidArgument for an empty prompt or max_tokens < 1, kOutOfRange past the context; else the bytes.
Result<int64_t> admission_bytes(const AdmissionLimits& l, int64_t n_prompt, int64_t max_tokens);

}  // namespace di::runtime
