// Batching defaults, defined once: the engine's options, its scheduler and the CLI's generation loop all
// start from these.
#pragma once

#include <cstddef>
#include <cstdint>

namespace di {

inline constexpr int kDefaultMaxRunning = 64;            // requests in the batch at once
inline constexpr int64_t kDefaultStepTokenBudget = 256;  // tokens per step (each decode counts 1)
inline constexpr int64_t kDefaultPrefillChunk = 128;     // prompt tokens per prefill chunk
inline constexpr size_t kDefaultMaxWaiting = 256;        // requests queued for admission

}  // namespace di
