// KV compressor of CSA/HCA layers (and of the lightning indexer): gated pooling of aligned windows.
// Window w covers positions w*rate .. w*rate + rate - 1; it emits one entry when its last token arrives.
//   no overlap (HCA): slots j = tokens of window w,              logit g_j = gate_j + bias[j]
//   overlap (CSA):    slots 0..rate-1 = a-half (channels 0..d-1) of window w-1 (value 0, logit -inf for w =
//   0),
//                     slots rate..2rate-1 = b-half (channels d..2d-1) of window w
//   alpha = softmax over slots per channel;  entry = sum_slots alpha * value      (d = head_dim of the entry)
// The op keeps the open window's tokens and the overlap state; norm and rope of the entry follow as ops.
// ref: transformers 5.17 DeepseekV4HCACompressor / DeepseekV4CSACompressor.
#pragma once

#include "ops/op_common.h"

namespace di::ops {

struct CompressArgs {
    TensorView kv;        // f32 [L, width] projected values of the chunk; width = d (HCA) or 2d (CSA)
    TensorView gate;      // f32 [L, width] projected gates, without position bias
    TensorView bias;      // f32 [rate, width] position bias
    TensorView buf_kv;    // f32 [rate, width] state: open window tokens, slot = position % rate
    TensorView buf_gate;  // f32 [rate, width] state
    TensorView ovl_kv;    // f32 [rate, d] state (overlap only): a-half values of the last closed window
    TensorView ovl_gate;  // f32 [rate, d] state (overlap only): a-half logits, bias included
    TensorView out;       // f32 [n_new, d] raw entries of the windows this chunk closes
    int64_t pos0 = 0;     // position of row 0 = tokens already seen
    int64_t rate = 1;
    bool overlap = false;
    // Windows closed by a chunk of L tokens starting at pos0.
    static int64_t n_new(int64_t pos0, int64_t L, int64_t rate) { return (pos0 + L) / rate - pos0 / rate; }
    template <class F>
    void visit(F&& f) {
        DI_VISIT(f, kv, Role::kIn);
        DI_VISIT(f, gate, Role::kIn);
        DI_VISIT(f, bias, Role::kIn);
        DI_VISIT(f, buf_kv, Role::kInOut);
        DI_VISIT(f, buf_gate, Role::kInOut);
        DI_VISIT(f, ovl_kv, Role::kInOut);
        DI_VISIT(f, ovl_gate, Role::kInOut);
        DI_VISIT(f, out, Role::kOut);
    }
};
void check(const CompressArgs& a);

}  // namespace di::ops
