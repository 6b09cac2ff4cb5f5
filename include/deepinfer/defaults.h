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
// (1,536 pairs). A step with a chunk holds the batch's decodes for its whole length (peers' chunked-prefill
// defaults are 2,048-16,384 tokens). Measured on the H200 (V4-Flash's 4 layers, native, an 8,192-token
// prompt; docs/cuda.md): chunks of 1,024 / 2,048 / 4,096 / 8,192 prefill 60.4K / 79.1K / 101.5K / 100.8K
// tokens/s. 2,048 takes a third more than 1,024 for a step of ~26 ms per 4 layers; 4,096 reaches the
// plateau at ~40 ms per 4 layers (about 0.4 s a step for the whole model, every decode waiting on it) and
// makes the prefix cache's granularity 4,096 tokens. --prefill-chunk 4096 for prefill-heavy serving.
inline constexpr int64_t kDefaultStepTokenBudgetCuda = 2048;
inline constexpr int64_t kDefaultPrefillChunkCuda = 2048;
inline constexpr size_t kDefaultMaxWaiting = 256;  // requests queued for admission

}  // namespace di
