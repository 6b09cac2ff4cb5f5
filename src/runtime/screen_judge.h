// Internals of the kernel screen shared by its case builders (screen.cpp: linear, moe and the checks;
// screen_cases.cpp: attention, indexer_topk, mhc_pre, hc_head): host/device buffers and the judge that runs
// the fallback and the candidate on one case and returns the row.
#pragma once

#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "runtime/screen.h"

namespace di::runtime::screen_detail {

// A buffer and a view of it with the shape of the view it was made from.
struct Buf {
    Tensor t;
    TensorView v;
};
// A copy of `src` in memory of `alloc` (a strided view: its whole span, with its strides).
Buf copy_of(ops::Backend& be, Allocator& alloc, const TensorView& src);
// Host tensor `h` on be's device.
Buf on_device(ops::Backend& be, const Tensor& h);
Tensor host_tensor(DType t, std::initializer_list<int64_t> shape);
void fill_uniform(Tensor& t, std::mt19937_64& rng, float lo, float hi);
// A host f32 tensor [n, hc, dim] of streams as bf16 ones (the native model's; the reference's cast).
Tensor bf16_streams_of(const Tensor& t);
// The non-fallback variants of `op` (the candidates a case screens), and a host tensor's values: bf16's as
// f32, f32's and ids' 32-bit words as they are.
std::vector<const ops::KernelVariant*> candidates(const std::vector<ops::KernelVariant>& all,
                                                  std::string_view op);
std::vector<float> floats_of(const Tensor& t);

// How a candidate's output is compared with the reference: relative L2 error per segment of the output
// buffer (the worst counts; no segments = the whole buffer), or exact (ids): the fraction of 32-bit words
// that differ, with tolerance 0. A segment's element i sits at first + (i / width) * period + i % width.
struct Segment {
    size_t first, count, width, period;
};
struct Compare {
    std::vector<Segment> segments;
    bool exact = false;
    // An exact compare's allowed difference: same(i, got, want) says that position i's two values, bits
    // apart, are still equivalent (the indexer: two entries whose double scores are near-ties).
    std::function<bool(size_t, float, float)> same;
    // An exact compare judged whole where one accepted difference moves others (the indexer's picks under
    // f16 scores: an entry in, another out, the ones between shifted): the number of words it does not
    // accept. Takes the place of the word-by-word count.
    std::function<size_t(const std::vector<float>& got, const std::vector<float>& ref)> count_bad;
    // The least tolerance of a case: the native precision's MoE, whose SwiGLU outputs are quantised inside
    // the op, so a candidate's f32 sums that straddle an e4m3 rounding boundary the reference's double sums
    // do not put that element one e4m3 step away (its row moves by up to 2^-4 |h_i| |W2[:, i]|). 0 elsewhere.
    double floor = 0;
};
inline constexpr double kNativeMoeFloor = 1e-3;
// Native attention may take q, keys and probabilities as f16 (2^-12 relative each): the scores' error is
// ~2^-12 |q| |k| / sqrt(head_dim), amplified by the softmax (ops/op_cases.h kAttentionNativeCuda).
inline constexpr double kNativeAttentionFloor = 2e-3;
// A candidate's error against ref under cmp: the worst relative L2 error, or for an exact compare the
// fraction of words that differ and that cmp.same does not accept.
double error_of(const std::vector<float>& got, const std::vector<float>& ref, const Compare& cmp);

// Runs the fallback, then the candidate, on one case: `run(y)` computes the op into y (on be's device),
// `run_one(y1)` its row 0 alone (nullptr: no batch-invariance check). `ref` holds y's reference values
// (floats, or the ids' bits for an exact compare); `k_len` the longest sum (the tolerance's floor).
// `with_ops`: ops whose every variant stays allowed in both runs (a fused pair's parts: its one-launch
// kernel builds on them).
// `fallback`: where several variants are judged on one case, the fallback's error and time of the first
// judge, reused by the others (the fallback runs six times a judge: seconds at a prefill's size).
struct FallbackRun {
    bool done = false;
    double error = 0, us = 0;
};
ScreenRow judge(ops::Backend& be, const ops::KernelVariant& v, std::string shape,
                const std::vector<float>& ref, int64_t k_len, const TensorView& y,
                const std::function<void(const TensorView&)>& run, const TensorView& y1,
                const std::function<void(const TensorView&)>& run_one, const Compare& cmp = {},
                const std::vector<std::string>& with_ops = {}, FallbackRun* fallback = nullptr);

// The cases of the stateful and mHC ops for every non-fallback variant of `variants` (screen_cases.cpp).
// native: each case again with the native precision's f16 permission (AttentionArgs::f16).
void screen_attention(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                      const model::ModelConfig& cfg, const std::vector<int64_t>& batches,
                      std::mt19937_64& rng, std::vector<ScreenRow>& rows, bool native);
// native: each case again with the f16 permission (IndexerTopkArgs::f16), judged by indexer_f16_bad.
void screen_indexer(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                    const model::ModelConfig& cfg, const std::vector<int64_t>& batches, std::mt19937_64& rng,
                    std::vector<ScreenRow>& rows, bool native);
// The picks' rule under the f16 permission (tests/gpu/cuda_attention_test.cpp states it): per query, the
// same number of valid picks as ref; every entry picked only here no worse, within the bounds, than every
// entry ref picked that is missing here; and the picks in order, best first, within the bounds.
// score(t, e, bound) gives query t's double score of entry e and sets bound to its f16 error bound.
// Returns the number of picks that break it (a query with a different count: all its k).
size_t indexer_f16_bad(const std::vector<int32_t>& got, const std::vector<int32_t>& ref, int64_t L, int64_t k,
                       const std::function<double(int64_t, int64_t, double&)>& score);
// An exact compare of the ids' bits (k picks a query) by indexer_f16_bad.
Compare indexer_f16_compare(int64_t k, std::function<double(int64_t, int64_t, double&)> score);
// Native mHC may take a prefill's mixing products on TF32 inputs (MhcPreArgs::tf32; ops/op_cases_rows.h
// kMhcTf32Cuda); native screens add a 2,048-token case with that permission (CUDA's TF32 form from there).
inline constexpr double kNativeMhcFloor = 5e-3;
inline constexpr int64_t kNativeMhcRows = 2048;
void screen_mhc(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                const model::ModelConfig& cfg, const model::ModelWeights& w,
                const std::vector<int64_t>& batches, std::mt19937_64& rng, std::vector<ScreenRow>& rows,
                bool native);
// The linear case table's screen cases (ops/op_cases.h, kScreen) for every non-fallback linear variant,
// on weights drawn there (screen_table.cpp).
void screen_table_linears(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                          std::mt19937_64& rng, std::vector<ScreenRow>& rows);
// The row-wise ops and the compressor (rms_norm, rope, swiglu, mhc_post, compress), screen_rowwise.cpp:
// the candidates of each op `wanted` accepts.
void screen_rowwise(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                    const model::ModelConfig& cfg, const model::ModelWeights& w,
                    const std::vector<int64_t>& batches, std::mt19937_64& rng, std::vector<ScreenRow>& rows,
                    const std::function<bool(const std::string&)>& wanted);
// The fused pairs (ops::Backend::rms_norm_rope, mhc_pre_norm, hc_head_norm, add_mhc_post), screen_fused.cpp.
bool is_fused_pair(std::string_view op);
void screen_fused(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                  const model::ModelConfig& cfg, const model::ModelWeights& w,
                  const std::vector<int64_t>& batches, std::mt19937_64& rng, std::vector<ScreenRow>& rows);

}  // namespace di::runtime::screen_detail
