// Launchers of the fused pairs (Backend::rms_norm_rope, mhc_pre_norm, hc_head_norm, add_mhc_post): one
// kernel where the pair's second op would re-read the first one's output in a launch of its own. Each
// computes the same f32/double expressions as the two kernels; where a reduction's order differs, it says so.
#pragma once

#include "ops/cuda/kernels.h"

namespace di::cuda {

// An rms_norm applied in the kernel that writes x: y = x * f32(1 / sqrt(mean(x^2) + eps)) * w, the sum of
// squares in double.
struct NormOut {
    const void* w = nullptr;  // [d], or null for the unweighted norm
    Fdt wdt = Fdt::kF32;
    float* y = nullptr;
    int64_t ld_y = 0;
    float eps = 1e-6f;
};

// rms_norm of the rows x[n * heads, hd] into norm.y (row r belongs to token r / heads), then rope's
// rotation of those rows; rope.x must be norm.y seen as [n, heads, hd]. Same sums in the same order as
// launch_rms_norm and the same products as launch_rope: bit-identical to the two launches.
bool rms_norm_rope_supported(int64_t hd, int64_t half);  // hd even, <= 4096; 2 * half <= hd
void launch_rms_norm_rope(const float* x, int64_t ldx, const NormOut& norm, const RopeParams& rope, Stream s);
// Several independent rms_norm_rope calls (each rms_norm_rope_supported) in one launch over a job table
// (scratch slot 12): the same bits as each call alone.
struct NormRopeJob {
    const float* x;
    int64_t ldx;
    NormOut norm;
    RopeParams rope;
};
// Up to kNormRopeJobsByValue jobs that all take the warp kernel travel as its argument rather than as a table
// copied from the host first, so a graph segment can capture them (q's and kv's norm + rope in one launch).
void launch_rms_norm_ropes(const NormRopeJob* jobs, int64_t count, Scratch& scratch, Stream s);
inline constexpr int kNormRopeJobsByValue = 4;
struct NormRopeJobs {
    NormRopeJob job[kNormRopeJobsByValue];
    int count = 0;
    __host__ __device__ const NormRopeJob& operator[](int64_t i) const { return job[i]; }
};

// mhc_pre or hc_head on the split_k kernels (mhc_split_supported), with the norm of each token's x in the
// finish kernel (its collapse threads' sum of squares: another order than launch_rms_norm's, so the
// norm may differ from the separate kernel's in the last bit).
void launch_mhc_pre_norm(const MhcParams& p, const NormOut& norm, Scratch& scratch, Stream s);

// mhc_post of a + b: the sum in f32 as launch_add, written to `sum` (which may alias a or b) as add does.
void launch_add_mhc_post(const void* streams, const float* a, int64_t ld_a, const float* b, int64_t ld_b,
                         float* sum, int64_t ld_sum, const float* post, int64_t ld_post, const float* comb,
                         int64_t ld_comb, void* out, bool bf16, int64_t n, int64_t hc, int64_t D, Stream s);

}  // namespace di::cuda
