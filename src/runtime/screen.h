// `deepinfer screen`: every non-fallback kernel variant of a backend A/B-tested on a model's own shapes
// (its distinct linear weights and its experts at decode batches; attention and the indexer at a short and a
// long context for every attention type it has; mhc_pre and hc_head with its own mixing weights), and the
// allow-list of those that pass.
// For each case: the reference result first, on host copies and the reference backend, before any candidate
// runs; the candidate through the backend's own dispatch with only it and the fallbacks allowed, and its
// dispatch count read back (the fallback answered: "skip: not dispatched", never "pass"); its error against
// the tolerance; two runs bit-identical where it claims determinism; row 0 alone bit-identical to its row in
// the batch where it claims batch invariance; its time against the fallback's.
//
// Tolerance (relative L2 error against the double-accumulating reference): max(2 x the fallback's own
// error, 4 * 2^-24 * sqrt(K)): f32 sums of K terms drift by ~2^-24 sqrt(K) of the output norm, and a variant
// may reorder them but must not be much worse than the verified kernel it replaces.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "ops/backend.h"

namespace di::runtime {

struct ScreenRow {
    std::string op, variant, shape;
    std::string verdict;  // "pass" (or "pass (<what was not checked>)"), "fail: <why>", "skip: <why>"
    double error = 0, tolerance = 0;
    double us = 0, fallback_us = 0;
    bool passed() const { return verdict.rfind("pass", 0) == 0; }
};

struct ScreenOptions {
    std::vector<std::string> ops = {"linear",       "moe",          "attention",     "indexer_topk",
                                    "mhc_pre",      "hc_head",      "rms_norm_rope", "mhc_pre_norm",
                                    "hc_head_norm", "add_mhc_post", "rms_norm",      "rope",
                                    "swiglu",       "mhc_post",     "compress"};
    std::vector<int64_t> batches = {1, 8, 64};
    // The linear and MoE cases also at this many rows (0: not), where the prefill variants take them (a
    // 512-row MoE is 3,072 pairs at k = 6, above the CUDA tiled variants' 2,048); each case's reference and
    // fallback run once for all the op's variants, the reference in row blocks on the host's threads.
    // -1: kDevicePrefillRows on a device backend, none on a host backend (whose variants do not change
    // with the row count, and whose fallbacks take seconds at that size).
    static constexpr int64_t kDevicePrefillRows = 512;
    int64_t prefill_rows = -1;
    // Also the native precision's cases where the model's formats have them (FP8 linears and quantised
    // expert inputs, each variant with the same rows quantised)
    bool native = true;
    uint64_t seed = 1;
};

struct ScreenReport {
    std::vector<ScreenRow> rows;
    ops::AllowList allow;  // fallbacks + every variant that passed wherever it ran and ran somewhere
    double seconds = 0;
    std::string table() const;  // markdown
};

// Host copy of a weight that may live on `be`'s device (data and scales).
struct HostWeight {
    ops::QWeight w;
    std::vector<Tensor> keep;
};
HostWeight host_weight(ops::Backend& be, const ops::QWeight& w);

// One linear case: weight `w` (on be's device) and its host copy, n random rows; act: the native
// precision's quantised rows (the reference quantises the same way).
ScreenRow screen_linear(ops::Backend& be, const ops::KernelVariant& v, const ops::QWeight& w,
                        const ops::QWeight& host, int64_t n, std::mt19937_64& rng,
                        ops::ActQuant act = ops::ActQuant::kNone);
// The same case for several variants against one reference.
std::vector<ScreenRow> screen_linear(ops::Backend& be, std::span<const ops::KernelVariant* const> vs,
                                     const ops::QWeight& w, const ops::QWeight& host, int64_t n,
                                     std::mt19937_64& rng, ops::ActQuant act = ops::ActQuant::kNone);

// Collects the verdicts into the allow-list the report carries.
ops::AllowList allow_list_from(const ops::Backend& be, const std::vector<ScreenRow>& rows);

// The cases come from the model's own weights and config: DeepSeek-V4's so far (another family is a
// kUnsupported error naming its architecture).
Result<ScreenReport> screen_model(model::Model& m, const ScreenOptions& o);

}  // namespace di::runtime
