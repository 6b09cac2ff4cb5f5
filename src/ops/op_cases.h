// The case table of the ops (issue 12's one table, begun with linear): the op tests of every backend and the
// op benchmarks draw their shapes and formats from here, each case saying what it exercises and who takes
// it, and the tolerances sit beside the cases with their reasons. The screen adds the model's own shapes
// (runtime/screen.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/attention.h"
#include "ops/linear.h"

namespace di::ops::cases {

// Who takes a case.
enum Use : unsigned {
    kCpuTest = 1,   // tests/ops: the cpu backend against ref, per-element bound
    kCudaTest = 2,  // tests/gpu: every CUDA variant that takes the case against ref
    kBench = 4,     // the op benchmarks (V4-Flash's matrices; they sweep their own row counts)
    kScreen = 8,    // `deepinfer screen`, beside the model's own shapes (odd sizes, other scale formats)
};

struct LinearCase {
    const char* name;
    int64_t n, in, out;
    WeightFormat fmt;
    DType dense_dt = DType::kBF16;
    DType scale_dt = DType::kE8M0;
    int64_t x_pad = 0, y_pad = 0;  // extra columns of the x / y rows: row stride > width
    int64_t w_row0 = 0;            // the weight is rows [w_row0, w_row0 + out) of a taller one
    unsigned use = kCpuTest | kCudaTest;
};

std::span<const LinearCase> linear_cases();
std::vector<LinearCase> linear_cases(Use use);

struct MoeCase {
    const char* name;
    int64_t n, D, I, E, k;  // tokens, hidden, moe_dim, experts, slots per token
    WeightFormat fmt;
    float limit = 10.0f;     // swiglu_limit (+inf: no clamp)
    int64_t n_distinct = 0;  // weight sets drawn: expert e uses set e % n_distinct (0: one per expert)
    DType scale_dt = DType::kE8M0;
    int64_t x_pad = 0;           // extra columns of the x / out rows
    bool repeat_expert = false;  // token 0 routes to the same expert in every slot
    bool wide_scales = false;    // fp4 scales 2^-31 .. 2^8: outside what CUDA's mma folds into f16 weights
    unsigned use = kCpuTest | kCudaTest;
    bool act_fp8 = false;  // MoeArgs::act: x and the SwiGLU output quantised (native precision)
    // x in {-1, 1}, fp4 weights in {0, +-1, +-2} with one scale: a chunk's up products sum exactly at any
    // precision (CUDA's w4a8: its up outputs carry no tensor-core rounding)
    bool small_ints = false;
    // fp4 scales stepping along K: a chunk's four alike, a row's up to 2^16 apart (CUDA's w4a8: its per-chunk
    // fold, not the row's)
    bool chunk_scales = false;
};

std::span<const MoeCase> moe_cases();
std::vector<MoeCase> moe_cases(Use use);

// attention over the window ring, the chunk's own keys and the compressed entries (ops/attention.h).
struct AttentionCase {
    const char* name;
    int64_t L, H, hd, window, pos0, n_cached;  // queries, heads, head_dim, window, chunk start, ring fill
    CompMask mask = CompMask::kNone;
    int64_t T = 0, rate = 1, n_picks = 0;  // compressed entries, their rate, picks per query (CSA)
    unsigned use = kCpuTest | kCudaTest;
};

std::span<const AttentionCase> attention_cases();
std::vector<AttentionCase> attention_cases(Use use);

// indexer_topk's scores and exact top-k (ops/indexer.h); the picks must equal the reference's.
enum class IndexerKeys : uint8_t {
    kRandom,
    kTies,           // every third key repeats an earlier one, every fifth is zero
    kNearTies,       // keys 1 ulp apart in one channel: scores differ by ~1e-8
    kManyZeroScores  // most entries point away from every query (ReLU gives 0): the tie rule decides
};
struct IndexerCase {
    const char* name;
    int64_t L, H, dim, T, k, pos0, rate;  // queries, heads, dim, entries, top-k, chunk start, compress rate
    IndexerKeys keys = IndexerKeys::kRandom;
    float w_lo = 0.0f;  // head weights uniform in [w_lo, 1)
    unsigned use = kCpuTest | kCudaTest;
};

std::span<const IndexerCase> indexer_cases();
std::vector<IndexerCase> indexer_cases(Use use);

// mhc_pre / mhc_post / hc_head (ops/mhc.h): n tokens of hc streams of width D.
struct MhcCase {
    const char* name;
    int64_t n, hc, D;
    float hc_eps = 1e-6f;
    int iters = 20;  // Sinkhorn iterations
    unsigned use = kCpuTest | kCudaTest;
};

std::span<const MhcCase> mhc_cases();
std::vector<MhcCase> mhc_cases(Use use);

// The KV compressor of a chunk (ops/compressor.h): the entries of the windows it closes and the state it
// leaves (the open window's tokens, the overlap half of the last closed window).
struct CompressCase {
    const char* name;
    int64_t L, d, rate, pos0;  // chunk tokens, entry width, compress rate, chunk start
    bool overlap;              // CSA: each window's softmax also covers the previous window's a-half
    unsigned use = kCudaTest;  // the cpu backend runs ref's compressor
};

std::span<const CompressCase> compress_cases();
std::vector<CompressCase> compress_cases(Use use);

// How a backend's result is judged against the reference's, and why.
struct Tolerance {
    const char* measure;
    double value;
    const char* why;
};

// cpu: per element, |cpu - ref| <= float_sum_bound(K) * sum_i |x_i w_i|.
inline constexpr Tolerance kLinearCpu{
    "per element, times sum |x_i w_i|", 0.0,
    "both sides dequantise exactly; the cpu kernels sum ceil(K / 16) products per float lane, fold 4 lanes "
    "and "
    "round once more, ref sums in double: the float sum's worst case, (ceil(K / 16) + 6) 2^-24 (+1%)"};
inline double float_sum_bound(int64_t k) { return (double((k + 15) / 16) + 6.0) * 0x1p-24 * 1.01; }

inline constexpr Tolerance kLinearCuda{
    "relative L2 over the output", 2e-5,
    "both dequantise exactly; the GPU accumulates in f32 in orders of its own (error ~ 2^-24 sqrt(K) of the "
    "norm: ~2e-6 at K = 8192), the reference in double; mma's hi + lo f16 activations carry 22 bits and its "
    "products are exact"};

// cpu: per element, the bound tests/ops/cpu_moe_test.cpp derives from the case's own magnitudes.
inline constexpr Tolerance kMoeCpu{
    "per element, from the case's magnitudes", 0.0,
    "gate/up's float sum bound (float_sum_bound(hidden) * sum |x w|) carried through SwiGLU (|silu'| <= "
    "1.1), "
    "SwiGLU outputs below FLT_MIN flushed (2^-126 each), the down projection's and the slot-order combine's "
    "float error"};

inline constexpr Tolerance kMoeNativeCuda{
    "relative L2 over the output", 1e-3,
    "quantised activations: f32 sums against the reference's double ones may put a SwiGLU output "
    "on the other side of an e4m3 rounding boundary, moving its pair's row by up to "
    "2^-4 |h_i| |W2[:, i]|"};
inline constexpr Tolerance kMoeW4a8Cuda{"relative L2 over the output", 1e-2,
                                        "W4A8 on FP8 tensor cores: they sum a 128-element chunk's products "
                                        "at ~14 bits (promoted to f32 every 128, "
                                        "as DeepSeek's FP8 kernels), so far more SwiGLU outputs than with "
                                        "f32 sums cross an e4m3 rounding boundary "
                                        "(2^-4 |h_i| each); measured 2.0e-3 .. 7.0e-3 on the native cases, "
                                        "within 1e-3 where the up sums are exact"};
inline constexpr Tolerance kMoeW4a8Bf16Cuda{
    "relative L2 over the output", 3e-2,
    "W4A8 with the expert sums stored as bf16 (set_moe_w4a8_bf16_mid, as DeepSeek's expert GEMMs write "
    "theirs): a sum's rounding (up to 2^-9 relative) moves ~1-2% of the SwiGLU outputs across an e4m3 "
    "rounding boundary, each by one step (2^-4 .. 2^-3 |h_i|): ~1e-2 expected; 3x that, not yet measured"};
inline constexpr Tolerance kMoeCuda{
    "relative L2 over the output", 2e-5,
    "f32 dot products of length hidden and moe_dim against the reference's double ones; mma's hi + lo f16 "
    "activations carry 22 bits, its products are exact and its sums f32"};

// cpu: per element, the bound tests/ops/cpu_attention_test.cpp derives from the case's own magnitudes.
inline constexpr Tolerance kAttentionCpu{
    "per element, from the case's magnitudes", 0.0,
    "the scores differ by float_sum_bound(hd) * scale |q| max|k| (Cauchy-Schwarz) plus rounding, so each "
    "softmax weight by a relative 2.2 x that + (2 n_keys + 8) 2^-24, relative to max_j |k_j[c]|"};

inline constexpr Tolerance kCompressCuda{
    "max abs over the entries (the state: exact copies)", 1e-6,
    "a per-channel softmax over <= 2 x rate slots with double sums on both sides; the entries differ by the "
    "f32 roundings of exp and of the weighted values (~1e-7 of O(1) values)"};

inline constexpr Tolerance kAttentionNativeCuda{
    "relative L2 over the output", 2e-3,
    "native precision: q, keys and probabilities rounded to f16 (2^-12 relative each) before exact products "
    "with f32 sums; the scores' error is ~2^-12 |q| |k| / sqrt(head_dim), amplified by the softmax"};
inline constexpr Tolerance kAttentionCuda{
    "relative L2 over the output", 1e-5,
    "f32 online softmax (split-KV: an exact log-sum-exp merge) against the reference's double two-pass one; "
    "head_dim 512 dot products in f32"};

inline constexpr Tolerance kIndexerPicks{
    "exact ids", 0.0,
    "the picks are ids: the cpu must equal the reference's; CUDA's f32 scores may order entries whose "
    "double scores lie within 1e-5 relative of each other differently (near-ties), and nothing else"};

}  // namespace di::ops::cases
