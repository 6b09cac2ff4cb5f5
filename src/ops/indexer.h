// Lightning indexer: picks the compressed entries each CSA query attends to.
//   S[t, w] = sum_h weight_scale * weights[t, h] * relu(q[t, h] . keys[w]) * score_scale
//   S[t, w] = -inf for w >= (p_t + 1) / rate       (entry not yet closed at the query's position)
//   picks[t] = the k = min(index_topk, T) best w, best first; -inf picks become -1.
// Tie rule: equal scores are ordered by lower entry id first (torch leaves ties unspecified).
// ref: transformers 5.17 DeepseekV4Indexer.
#pragma once

#include "ops/op_common.h"

namespace di::ops {

struct IndexerTopkArgs {
    TensorView q;        // f32 [L, index_heads, index_dim], roped
    TensorView weights;  // f32 [L, index_heads] head weights (weights_proj output)
    TensorView keys;     // f32 [T, index_dim] compressed index keys
    TensorView picks;    // i32 [L, k]
    int64_t pos0 = 0;
    int64_t rate = 1;
    float weight_scale = 1.0f;  // index_heads^-1/2
    float score_scale = 1.0f;   // index_dim^-1/2
    // Native precision's permission to round q and keys to f16 before the products (CUDA's tensor-core
    // scores take it; ref and cpu compute in f32 as always). Picks may then differ from the reference
    // between entries whose scores lie within the rounding's bound of each other.
    bool f16 = false;
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, q, Role::kIn);
        DI_VISIT(f, weights, Role::kIn);
        DI_VISIT(f, keys, Role::kIn);
        DI_VISIT(f, picks, Role::kOut);
    }
};
void check(const IndexerTopkArgs& a);

}  // namespace di::ops
