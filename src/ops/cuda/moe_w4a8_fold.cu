// The expert table's check whether its fp4 group scales fold into e4m3 (kernels.h, E4m3Fold): what the W4A8
// kernels' conversion (moe_w4a8.cuh, w4a8_lut) takes, per chunk or per row.
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_frag.cuh"

namespace di::cuda {
namespace {

using mma::kChunk;

// flag |= 1 where a 128-element chunk's four group scales of a row of matrix blockIdx.x do not fold into
// e4m3 (more than 11 binades apart, the largest under 2^-120 or NaN), |= 2 where a whole row's do not. A
// thread per row: run once when the expert table is built.
__global__ void __launch_bounds__(256) e4m3_fold_kernel(const WeightRef* table, int* flag) {
    allow_early_next();
    const WeightRef w = table[blockIdx.x];
    const auto* sc = static_cast<const uint8_t*>(w.scale);
    const int64_t chunks = w.in_dim / kChunk;
    bool chunk_bad = false, row_bad = false;
    for (int64_t r = threadIdx.x; r < w.out_dim; r += blockDim.x) {
        int row_lo = 255, row_hi = 0;
        for (int64_t c = 0; c < chunks; ++c) {
            const uint8_t* b = sc + r * w.ld_scale + 4 * c;
            const int lo = min(min(b[0], b[1]), min(b[2], b[3])), hi = max(max(b[0], b[1]), max(b[2], b[3]));
            chunk_bad |= hi - lo > 11 || hi < 7 || hi == 255;
            row_lo = min(row_lo, lo), row_hi = max(row_hi, hi);
        }
        row_bad |= row_hi - row_lo > 11;
    }
    const int bad = (__syncthreads_or(chunk_bad) ? 1 : 0) | (__syncthreads_or(row_bad) ? 2 : 0);
    if (bad != 0 && threadIdx.x == 0) atomicOr(flag, bad);
}

}  // namespace

E4m3Fold fp4_scales_fold_to_e4m3(const WeightRef* table_device, const WeightRef* table_host, int64_t count,
                                 Stream s) {
    if (count == 0) return {};
    for (int64_t i = 0; i < count; ++i)
        if (table_host[i].format != 2 || !table_host[i].scale_e8m0 || table_host[i].in_dim % kChunk != 0)
            return {};
    const int bad = device_flag(s, [&](int* flag, cudaStream_t st) {
        e4m3_fold_kernel<<<unsigned(count), 256, 0, st>>>(table_device, flag);
    });
    return {(bad & 1) == 0, bad == 0};
}

}  // namespace di::cuda
