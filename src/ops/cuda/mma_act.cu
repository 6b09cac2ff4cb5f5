// f32 activation rows to the hi/lo f16 chunks of mma_frag.cuh (fp4 or fp8 order): one warp per (row,
// 128-element chunk).
#include "ops/cuda/mma_frag.cuh"

namespace di::cuda::mma {
namespace {

constexpr int kWarps = 4;

template <bool kFp8Order>
__global__ void __launch_bounds__(32 * kWarps)
    act_chunks_kernel(const float* x, int64_t ldx, int64_t rows, int64_t chunks, ActChunks out) {
    const int64_t item = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (item >= rows * chunks) return;
    const int lane = threadIdx.x & 31;
    const int64_t r = item / chunks, c = item % chunks;
    const float* src = x + r * ldx + c * kChunk;
    float v[4];
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = src[32 * j + lane], m = fmaxf(m, fabsf(v[j]));  // fmaxf skips NaN
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    int sh = 0;  // s = 2^sh puts the max in [2^14, 2^15); 0 and inf keep s = 1
    if (m > 0.0f && m <= 3.4e38f) {
        int e;
        frexpf(m, &e);  // m = f 2^e, f in [0.5, 1)
        sh = min(max(15 - e, -120), 120);
    }
    const float s = __int_as_float((127 + sh) << 23);
    __half* dst = reinterpret_cast<__half*>(out.data + item * kChunkWords);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int e = 32 * j + lane;
        const float xs = v[j] * s;
        const __half hi = __float2half_rn(xs);
        const __half lo = __float2half_rn(xs - __half2float(hi));
        const int at = kFp8Order ? act_word_fp8(e) * 2 + act_half_fp8(e) : act_word(e) * 2 + act_half(e);
        dst[at] = hi;
        dst[2 * 64 + at] = lo;  // the lo half of the chunk follows the 64 words of hi
    }
    if (lane == 0) out.inv[item] = __int_as_float((127 - sh) << 23);
}

}  // namespace

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
