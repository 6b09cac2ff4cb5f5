// Batching defaults, defined once: the engine's options, its scheduler and the CLI's generation loop all
// start from these.
#pragma once

#include <cstddef>
#include <cstdint>

namespace di {

inline constexpr int kDefaultMaxRunning = 64;            // requests in the batch at once
inline constexpr int64_t kDefaultStepTokenBudget = 256;  // tokens per step (each decode counts 1)
inline constexpr int64_t kDefaultPrefillChunk = 128;     // prompt tokens per prefill chunk
// On cuda, steps large enough for the prefill kernels on the tensor cores: the routed experts' W4A8 kernel
// takes a chunk from 20 (token, slot) pairs an expert (854 tokens at V4's 6 of 256 experts a token), the
// linears' cuBLASLt FP8 from 64 rows, attention's warpgroup kernel from 16 queries. A step with a chunk holds
// the batch's decodes for its whole length (peers' chunked-prefill defaults are 2,048-16,384 tokens).
// Measured on an H100 (V4-Flash's 4 layers, native, a 16,384-token prompt; docs/benchmarks.md, 2026-12-07):
// chunks of 1,024 / 2,048 / 4,096 / 16,384 prefill 70.1K / 104.3-104.8K / 123.3-130.0K / 129.2K tokens/s;
// 4,096 is ~1.2x as fast as 2,048 for a step ~1.7x as long (~33 against ~19.5 ms per 4 layers, ~0.36 s for
// the whole model, every decode waiting on it), and the prefix cache's granularity is the chunk.
// --prefill-chunk 2048 where decode latency under load matters more.
inline constexpr int64_t kDefaultStepTokenBudgetCuda = 4096;
inline constexpr int64_t kDefaultPrefillChunkCuda = 4096;
inline constexpr size_t kDefaultMaxWaiting = 256;  // requests queued for admission

}  // namespace di
