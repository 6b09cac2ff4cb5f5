// Which routed experts one rank holds under expert parallelism (several GPUs): rank r of n holds the
// contiguous block [r E / n, (r + 1) E / n) of every MoE layer's E experts (V4-Flash on two GPUs: 128
// each). The other experts are validated by name, shape and dtype but not placed on the rank's device.
#pragma once

#include <cstdint>

namespace di::model {

struct ExpertPartition {
    int rank = 0, size = 1;
    int64_t first(int64_t n_experts) const { return int64_t(rank) * n_experts / size; }
    int64_t end(int64_t n_experts) const { return int64_t(rank + 1) * n_experts / size; }
    bool owns(int64_t expert, int64_t n_experts) const {
        return expert >= first(n_experts) && expert < end(n_experts);
    }
};

}  // namespace di::model
