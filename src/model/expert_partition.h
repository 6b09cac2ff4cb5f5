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
    // The rank that holds `expert` (in [0, n_experts)) in a group of `size`.
    int owner(int64_t expert, int64_t n_experts) const {
        int r = int(int64_t(size) * expert / n_experts);  // the block start at or below expert, up to one off
        while (r + 1 < size && ExpertPartition{r + 1, size}.first(n_experts) <= expert) ++r;
        while (r > 0 && ExpertPartition{r, size}.first(n_experts) > expert) --r;
        return r;
    }
};

}  // namespace di::model
