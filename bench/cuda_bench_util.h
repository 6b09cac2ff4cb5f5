// What the CUDA kernel benchmarks share: random device data, timing of captured launches, the scratch the
// launchers take, and the result rows and their tables.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/cuda/kernels.h"

namespace di::bench {

extern std::mt19937_64 g_rng;

// Device buffer of random bytes; `kind` keeps values finite: 0 any byte but fp8 NaN, 1 e8m0 near 2^-6,
// 2 floats in [-1, 1], 3 bf16 in [-0.1, 0.1].
void* random_device(size_t bytes, int kind);
// Median time of one launch: `launch(i)` for i in [0, reps) captured as one graph, replayed 7 times.
double graph_us(cudaStream_t s, int reps, const std::function<void(int)>& launch);
// Microseconds per launch(i) over `reps` calls issued directly on the stream (no graph: for launches that
// a capture cannot hold, such as a pageable job-table upload), after one untimed call.
double stream_us(cudaStream_t s, int reps, const std::function<void(int)>& launch);

// A bandwidth-bound kernel's time and the bytes it must move.
struct Row {
    std::string name, variant;
    double us, bytes;
};
// A compute-bound kernel's time and its FLOPs.
struct GemmRow {
    std::string name, variant;
    double us, flops;
};
// The rows as a markdown table after `intro`: `columns` names the first two ("op | variant"), then time,
// TFLOP/s and the share of `peak_tflops` (the dense rate of `peak`).
std::string rate_table(const std::string& intro, const char* columns, const std::vector<GemmRow>& rows,
                       double peak_tflops, const char* peak);

class BenchScratch final : public cuda::Scratch {
  public:
    ~BenchScratch() override;
    void* get(int slot, size_t bytes) override;

  private:
    std::pair<void*, size_t> slots_[cuda::kScratchSlots] = {};
};

}  // namespace di::bench
