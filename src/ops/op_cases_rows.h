// The case table's element-wise and row-wise ops (embed, add, swiglu, rms_norm, rope, window_store, route)
// and the mHC ops' tolerances: what tests/gpu/cuda_small_ops_test.cpp, cuda_moe_mhc_test.cpp,
// cuda_fused_test.cpp and tests/ops/cpu_mhc_test.cpp draw from, beside ops/op_cases.h. The cpu backend runs
// ref's kernels for the row-wise ops, so only the CUDA tests take these cases.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "ops/moe.h"
#include "ops/op_cases.h"

namespace di::ops::cases {

// embed: `tokens` ids drawn below `vocab` from a [vocab, dim] table of dtype `table`.
struct EmbedCase {
    const char* name;
    DType table;
    int64_t vocab, dim, tokens;
};
std::span<const EmbedCase> embed_cases();

// add and swiglu (V4's swiglu_limit 10 clamps some of the inputs, drawn in [-12, 12]) on [n, d].
struct ElementwiseCase {
    const char* name;
    int64_t n, d;
};
std::span<const ElementwiseCase> elementwise_cases();

// rms_norm of n rows of width d, weighted (dtype w) or not.
struct NormCase {
    const char* name;
    int64_t n, d;
    DType w;
    bool weighted;
};
std::span<const NormCase> norm_cases();

// rope of the first `rope` channels of n tokens x heads x hd, at random positions below 70,000.
struct RopeCase {
    const char* name;
    int64_t n, heads, hd, rope;
    float mscale;
    bool inverse;
};
std::span<const RopeCase> rope_cases();

// window_store of L rows of width hd from position pos0 into a ring of `ring` rows.
struct WindowStoreCase {
    const char* name;
    int64_t L, ring, hd, pos0;
};
std::span<const WindowStoreCase> window_store_cases();

// route of n tokens over E experts, top k: a bias or not, hash routing (tid2eid of i32 or i64) or not,
// scores with many ties at the k-th place (4 distinct logits) or not.
struct RouteCase {
    const char* name;
    int64_t n, E, k;
    ScoreFunc func;
    bool bias, hash, i64, ties;
};
std::span<const RouteCase> route_cases();

inline constexpr Tolerance kRouteIdsExact{"exact ids", 0.0,
                                          "scores in double on both sides, top-k with the lower id first "
                                          "among equals: the same experts"};
inline constexpr Tolerance kRouteWeightsCuda{"relative L2 over the weights", 1e-6,
                                             "scores and their normalisation in double on both sides, "
                                             "rounded to f32 once: CUDA's exp / log may differ by an ulp"};
inline constexpr Tolerance kCopyExact{"max abs", 0.0,
                                      "embed gathers, window_store copies and add makes one f32 addition: "
                                      "the same bits on both sides"};
inline constexpr Tolerance kSwigluCuda{
    "relative L2 over the output", 1e-6,
    "exp and the product in double on both sides, rounded to f32 once: CUDA's exp and libm's may differ by "
    "an ulp"};
inline constexpr Tolerance kRmsNormCuda{
    "relative L2 over the output", 1e-6,
    "the sum of squares in double on both sides, in another order (~1e-15 relative), then the same f32 "
    "scaling: an output may round the other way"};
inline constexpr Tolerance kRopeCuda{"relative L2 over the output", 1e-6,
                                     "the same f32 products, cos and sin in double: ulp-level differences"};
// mhc_pre (x, post, comb), mhc_post, hc_head and the fused pairs built on them.
inline constexpr Tolerance kMhcCuda{
    "relative L2 over each output", 1e-6,
    "norm and mixing sums in double on both sides (the FP64 tensor cores' in another order), Sinkhorn in "
    "double; each f32 output may round the other way, and x and the head output carry post's rounding "
    "times the streams"};
// mhc_post (and add_mhc_post) storing bf16 streams (the native precision) against ref's rounding of its own
// sums.
inline constexpr Tolerance kMhcPostBf16Cuda{
    "relative L2 over the output", 1e-4,
    "both sides round their f32 sums to bf16; where those sums differ in the last bit (kMhcCuda) an element "
    "may round to the other bf16 neighbour, 2^-8 of itself"};
// mhc_pre with MhcPreArgs::tf32 (the native precision, CUDA from 2,048 tokens) against ref's exact sums.
inline constexpr Tolerance kMhcTf32Cuda{
    "relative L2 over each output", 2e-3,
    "the mixes' 16,384-term products on TF32 inputs (10-bit mantissas, each rounded by 2^-11 of itself at "
    "most) with f32 sums: a mix moves by ~2^-11 of its magnitude, the sigmoids' and the softmax's arguments "
    "(|arg| up to ~7 in the tests) by a few 1e-3, and post, comb and x with them; the transformers bf16 "
    "model's own noise floor against fp32 is larger (docs/benchmarks.md); measured on an H100 at 2,056 "
    "tokens: "
    "2.5e-4 to 2.9e-4"};
// cpu: per element, 2^-22 (|ref| + 1.1 sum_i |stream_i[c]|) for x and the head output, 2^-22 |ref| for post
// and comb (tests/ops/cpu_mhc_test.cpp).
inline constexpr Tolerance kMhcCpu{
    "per element, 2 ulp (+ post's ulp times the streams for x)", 0.0,
    "ref's double arithmetic with the two long double sums (mean square, fn . n) in another order (~1e-15 "
    "relative): a float output may round the other way (2 ulp), and a 1-ulp change of pre_i moves x by "
    "2^-23 pre_i |stream_i[c]| (pre_i <= 1 + hc_eps)"};

}  // namespace di::ops::cases
