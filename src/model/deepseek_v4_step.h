// DeepseekV4's per-step views, shared by the forward (deepseek_v4.cpp) and the drafter
// (deepseek_v4_draft.cpp).
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "model/deepseek_v4.h"

namespace di::model {

struct DeepseekV4::Step {
    std::span<const SeqChunk> chunks;
    std::vector<DeepseekV4State*> states;  // of each chunk
    int64_t n = 0;                         // tokens in the step
    std::vector<int64_t> row0;             // first row of each chunk
    std::vector<int64_t> len;              // tokens of each chunk
    std::vector<int64_t> pos0;             // position of each chunk's first token
    TensorView tokens;                     // i32 [n]
    TensorView positions;                  // i32 [n]
    TensorView streams, spare;  // stream_dtype() [n, hc_mult, hidden_dim] residual streams (double-buffered)
    TensorView x, post, comb;   // mHC outputs: [n, hidden_dim], [n, hc_mult], [n, hc_mult, hc_mult]
    int segment = 0;            // graph segments begun so far
    bool greedy = false;        // the head segment ends with the greedy pick (forward_greedy)
    TensorView picks;           // i32 [2, rows]: the greedy ids and the first non-finite indices
};

// Columns [c0, c0 + width) of a 2-d view.
inline TensorView columns(const TensorView& v, int64_t c0, int64_t width) {
    TensorView r = v;
    r.data = static_cast<char*>(v.data) + c0 * v.stride[1] * int64_t(dtype_size(v.dtype));
    r.shape[1] = width;
    return r;
}

// A 2-d view's transpose (the same memory, strides swapped).
inline TensorView transposed(const TensorView& v) {
    TensorView r = v;
    std::swap(r.shape[0], r.shape[1]);
    std::swap(r.stride[0], r.stride[1]);
    return r;
}

inline TensorView as3d(const TensorView& v, int64_t a, int64_t b, int64_t c) { return v.reshape({a, b, c}); }

}  // namespace di::model
