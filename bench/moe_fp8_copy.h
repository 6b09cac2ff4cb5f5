// The baseline issue 11 asks the W4A8 MoE to beat: the fp4 experts dequantised into an FP8 copy, then
// cuBLASLt's block-scaled FP8 GEMM for each expert (cuda_kernel_bench --only moe_prefill).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_bench_util.h"
#include "ops/cuda/kernels.h"

namespace di::bench {

// One fp4 expert matrix [out, in] (e2m1 pairs, a UE8M0 scale per 32 of a row) into e4m3 rows with 128x128
// block scales (f32 [out / 128][ld_sq], cuBLASLt's layout): each block's largest group scale, every element
// rescaled to it and rounded to e4m3 (a group far below its block's largest scale loses bits: a timing
// baseline, not a path the model takes).
struct Fp4ToFp8Job {
    const uint8_t* data;
    const uint8_t* scale;
    int64_t ld, ld_scale, out, in;
    uint8_t* q;
    int64_t ld_q;
    float* sq;
    int64_t ld_sq;
};
// Every job's 128x128 blocks in one launch (jobs in device memory; out and in multiples of 128).
void launch_fp4_to_fp8(const Fp4ToFp8Job* jobs, int64_t count, int64_t max_out, int64_t max_in,
                       cudaStream_t s);

// A prefill chunk's MoE the baseline's way, beside w4a8 in `rows`: the conversion of the active experts,
// then a block-scaled FP8 GEMM per active expert for up (W1 and W3 as one [2I, D] matrix) and down, on
// inputs quantised per expert beforehand (SwiGLU and the quantisers w4a8 runs inside are not timed here).
// `ids` are the chunk's [n, k] expert ids.
void bench_moe_fp8_copy(std::vector<GemmRow>& rows, cudaStream_t s, const std::vector<cuda::WeightRef>& table,
                        const std::vector<int32_t>& ids, int64_t E, int64_t D, int64_t I,
                        const std::string& label, double flops);

}  // namespace di::bench
