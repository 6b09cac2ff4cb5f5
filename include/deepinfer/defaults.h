// Batching defaults, defined once: the engine's options, its scheduler and the CLI's generation loop all
// start from these.
#pragma once

#include <cstddef>
#include <cstdint>

namespace di {

inline constexpr int kDefaultMaxRunning = 64;            // requests in the batch at once
inline constexpr int64_t kDefaultStepTokenBudget = 256;  // tokens per step (each decode counts 1)
inline constexpr int64_t kDefaultPrefillChunk = 128;     // prompt tokens per prefill chunk
// On cuda, steps large enough for the prefill kernels on the tensor cores: the routed experts' `gemm` takes
// a chunk from 2,048 (token, slot) pairs (342 tokens at V4's 6 experts a token), the linears' from 64 rows,
// attention's `mma` from 16 queries; 256-token steps kept every prefill's MoE on the decode-shaped kernel
// (1,536 pairs). A step with a 1,024-token chunk holds the batch's decodes for its whole length (peers'
// chunked-prefill defaults are 2,048-16,384 tokens); not yet tuned by measurement.
inline constexpr int64_t kDefaultStepTokenBudgetCuda = 2048;
inline constexpr int64_t kDefaultPrefillChunkCuda = 1024;
inline constexpr size_t kDefaultMaxWaiting = 256;  // requests queued for admission

}  // namespace di
