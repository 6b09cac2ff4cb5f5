// The floating-point operations an op's maths takes (a multiply-add counts 2), whatever kernel runs it: what
// a profile sets an op's time against to give its TFLOP/s (the tensor-core ops of a prefill against the
// dense GEMM rates). Products only; the element-wise work around them (softmax, relu, scales) is left out,
// and ops that are bandwidth work (norms, rope, copies, routing, sampling) count 0.
#pragma once

#include <cstdint>
#include <span>

#include "ops/attention.h"
#include "ops/indexer.h"
#include "ops/linear.h"
#include "ops/mhc.h"
#include "ops/moe.h"

namespace di::ops {

// 2 n out in.
double linear_flops(const LinearArgs& a);
// Per (token, slot) pair whose expert id is in [0, n_experts) and taken by the pass (MoeArgs::owns): up 2 x
// 2 I D (W1 and W3), down 2 D I. `ids`: the host copy of a.ids, row-major [n, k]. The combine pass: 0.
double moe_flops(const MoeArgs& a, std::span<const int32_t> ids);
// Per query t at p = pos0 + t and head: q . k and P v over its visible keys (4 head_dim flops a key): the
// window's positions in (p - window, p] from pos0 - n_cached on, the compressed entries w < (p + 1) / rate
// (kCausal) or the distinct valid ids of its picks row (kPicks). `picks`: the host copy of a.picks, row-major
// [L, k] (empty unless kPicks).
double attention_flops(const AttentionArgs& a, std::span<const int32_t> picks);
// Per query: index_heads q . key products of index_dim over the entries closed at its position, w < (p + 1)
// / rate.
double indexer_flops(const IndexerTopkArgs& a);
// The mixing rows' products with the flattened streams: 2 n M (hc D), M = fn's rows.
double mhc_pre_flops(const MhcPreArgs& a);
double hc_head_flops(const HcHeadArgs& a);

}  // namespace di::ops
