#include "runtime/admission.h"

#include "model/state_size.h"

namespace di::runtime {

int64_t state_bytes(const AdmissionLimits& l, int64_t capacity) {
    return model::StateSize{l.fixed_bytes, l.bytes_per_token}.bytes_for(capacity);
}

Result<int64_t> admission_bytes(const AdmissionLimits& l, int64_t n_prompt, int64_t max_tokens) {
    if (n_prompt < 1) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty");
    if (max_tokens < 1)
        return make_error(ErrorCode::kInvalidArgument, "max_tokens {} must be at least 1", max_tokens);
    if (n_prompt > l.max_context || max_tokens > l.max_context - n_prompt)
        return make_error(
            ErrorCode::kOutOfRange, "the prompt ({} tokens) plus max_tokens ({}) exceeds {} of {} tokens",
            n_prompt, max_tokens,
            l.max_context == l.model_context ? "the model's context" : "the context limit", l.max_context);
    return state_bytes(l, n_prompt + max_tokens);
}

}  // namespace di::runtime
