// f32 activation rows to the hi/lo f16 chunks of mma_frag.cuh (fp4 or fp8 order): one warp per (row,
// 128-element chunk).
#include "ops/cuda/mma_frag.cuh"

namespace di::cuda::mma {
namespace {

constexpr int kWarps = 4;

template <bool kFp8Order>
__global__ void __launch_bounds__(32 * kWarps)
    act_chunks_kernel(const float* x, int64_t ldx, int64_t rows, int64_t chunks, ActChunks out) {
    allow_early_next();
    const int64_t item = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (item >= rows * chunks) return;
    const int64_t r = item / chunks, c = item % chunks;
    warp_chunk<kFp8Order>(x + r * ldx + c * kChunk, out.data + item * kChunkWords, out.inv + item,
                          int(threadIdx.x & 31));
}

// One block per row: the row's max, then its chunks with the one shift, a warp per chunk.
template <bool kFp8Order>
__global__ void __launch_bounds__(32 * kWarps)
    act_rows_kernel(const float* x, int64_t ldx, int64_t chunks, ActChunks out) {
    allow_early_next();
    const float* row = x + int64_t(blockIdx.x) * ldx;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __shared__ float red[kWarps];
    const int sh = row_shift<kWarps>(row, chunks * kChunk, red);
    uint32_t* dst = out.data + int64_t(blockIdx.x) * chunks * kChunkWords;
    for (int64_t c = warp; c < chunks; c += kWarps)
        warp_chunk_at<kFp8Order>(row + c * kChunk, dst + c * kChunkWords, sh, lane);
    if (threadIdx.x == 0) out.inv[blockIdx.x] = __int_as_float((127 - sh) << 23);
}

}  // namespace

void launch_act_rows(const float* x, int64_t ldx, int64_t rows, int64_t K, ActChunks out, cudaStream_t s,
                     bool fp8_order) {
    if (rows == 0) return;
    if (fp8_order)
        act_rows_kernel<true><<<unsigned(rows), 32 * kWarps, 0, s>>>(x, ldx, K / kChunk, out);
    else
        act_rows_kernel<false><<<unsigned(rows), 32 * kWarps, 0, s>>>(x, ldx, K / kChunk, out);
}

void launch_act_chunks(const float* x, int64_t ldx, int64_t rows, int64_t K, ActChunks out, bool fp8_order,
                       cudaStream_t s) {
    const int64_t items = rows * (K / kChunk);
    if (items == 0) return;
    if (fp8_order)
        act_chunks_kernel<true>
            <<<blocks_for(items, kWarps), 32 * kWarps, 0, s>>>(x, ldx, rows, K / kChunk, out);
    else
        act_chunks_kernel<false>
            <<<blocks_for(items, kWarps), 32 * kWarps, 0, s>>>(x, ldx, rows, K / kChunk, out);
}

}  // namespace di::cuda::mma
