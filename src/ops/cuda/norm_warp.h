// rms_norm and rms_norm + rope a warp a row for rows of at most kNormWarpMaxD elements (norm_warp.cu), used
// by elementwise.cu's launchers where the rows allow float4 access. The same bits whichever of these launches
// computes a row; other bits than the block-a-row kernels (another order of the sum of squares).
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/fused_kernels.h"

namespace di::cuda {

inline constexpr int64_t kNormWarpMaxD = 512;
// d a multiple of 4 and at most kNormWarpMaxD, x and y rows 16-byte aligned.
bool norm_warp_ok(const float* x, int64_t ldx, const float* y, int64_t ldy, int64_t d);
void launch_rms_norm_warp(const float* x, int64_t ldx, const void* w, Fdt wdt, float* y, int64_t ldy,
                          int64_t n, int64_t d, float eps, cudaStream_t st);
bool norm_rope_warp_ok(const float* x, int64_t ldx, const NormOut& norm, const RopeParams& rp);
void launch_rms_norm_rope_warp(const float* x, int64_t ldx, const NormOut& norm, const RopeParams& rp,
                               cudaStream_t st);
// jobs (each norm_rope_warp_ok) already on the device at dev; host: the same table on the host.
void launch_rms_norm_ropes_warp(const NormRopeJob* dev, const NormRopeJob* host, int64_t count,
                                cudaStream_t st);
// jobs (each norm_rope_warp_ok) as the kernel's argument: the same bits as the table's launch.
void launch_rms_norm_ropes_warp(const NormRopeJobs& jobs, cudaStream_t st);

}  // namespace di::cuda
