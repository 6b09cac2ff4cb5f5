// Attention of one sequence's chunk over its sliding window and its compressed entries, with per-head sinks.
// Keys = values (one shared head).  For query t at position p = pos0 + t and head h:
//   z_j = (q_h . k_j) * scale  over window keys p' in (p - window, p] and the visible compressed entries
//   P_j = exp(z_j - m) / (sum_j exp(z_j - m) + exp(sink_h - m)),  m = max(max_j z_j, sink_h)
//   out_h = sum_j P_j k_j
// Compressed entry w is visible: kCausal (HCA) iff w < (p + 1) / rate;  kPicks (CSA) iff w is in picks[t].
// ref: transformers 5.17 DeepseekV4Attention (eager) with DeepseekV4{HCA,CSA}Cache.
#pragma once

#include "ops/op_common.h"
#include "ops/rope.h"

namespace di::ops {

enum class CompMask : uint8_t { kNone, kCausal, kPicks };

struct AttentionArgs {
    TensorView q;      // f32 [L, n_heads, head_dim], query positions pos0 .. pos0 + L - 1
    TensorView ring;   // f32 [window - 1, head_dim] cached kv; position p in slot p % (window - 1)
    TensorView kv;     // f32 [L, head_dim] kv of the chunk itself
    TensorView comp;   // f32 [T, head_dim] compressed entries (kCausal / kPicks), else empty
    TensorView picks;  // i32 [L, k] entry ids per query, -1 = no entry (kPicks only)
    TensorView sinks;  // f32 [n_heads]
    TensorView out;    // f32 [L, n_heads, head_dim]
    int64_t pos0 = 0;
    int64_t n_cached = 0;  // ring holds positions pos0 - n_cached .. pos0 - 1 (n_cached <= window - 1)
    int64_t window = 0;    // keys per query including itself
    CompMask comp_mask = CompMask::kNone;
    int64_t rate = 1;    // compress_rate (kCausal)
    float scale = 1.0f;  // head_dim^-1/2
    // The native precision's permission: q, the keys and the probabilities may enter their products rounded
    // to f16 (CUDA's tensor-core prefill takes it; ref and cpu compute in f32 as always).
    bool f16 = false;
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, q, Role::kIn);
        DI_VISIT(f, ring, Role::kIn);
        DI_VISIT(f, kv, Role::kIn);
        DI_VISIT(f, comp, Role::kIn);
        DI_VISIT(f, picks, Role::kIn);
        DI_VISIT(f, sinks, Role::kIn);
        DI_VISIT(f, out, Role::kOut);
    }
};
void check(const AttentionArgs& a);

// Keeps the last window - 1 positions: writes kv rows of the chunk into their ring slots.
struct WindowStoreArgs {
    TensorView kv;    // f32 [L, head_dim] at positions pos0 .. pos0 + L - 1
    TensorView ring;  // f32 [window - 1, head_dim]
    int64_t pos0 = 0;
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, kv, Role::kIn);
        DI_VISIT(f, ring, Role::kInOut);
    }
};
void check(const WindowStoreArgs& a);

// The queries' preparation an attention layer's tail takes over (Backend::attentions_stored): every head row
// of q (rope.x, [n, n_heads, head_dim], contiguous: the rows of every job's q) normed as the unweighted
// rms_norm with eps, then rotated as rope(rope). A backend may apply it in place before the attention or
// where its kernel loads q, so q's contents after the call are unspecified. With src (bf16, rope.x's shape,
// contiguous: the queries as their linear stored them), the queries are src's values: a backend casts them
// into rope.x first, or reads src where its kernel loads q.
struct QueryPrep {
    RopeArgs rope;
    float eps = 1e-6f;
    TensorView src{};
};
void check(const QueryPrep& a);

}  // namespace di::ops
