// The warpgroup tensor cores' ceiling for the fp4 experts' kernel shape (moe_wgmma.cu), measured without the
// memory traffic: wgmma with f16 A fragments from registers and B (the token rows) from 128-byte-swizzled
// shared memory, N = 64 or 128 columns, looping on data already on chip; with and without the per-chunk
// fp4 -> f16 conversion of the A fragments that the real kernel does in registers, at 1 to 4 blocks (one
// warpgroup each) an SM. What it answers: how far below the f16 rate the instruction shape alone is, and
// what the conversion costs, so the MoE kernel's distance from both can be told apart.
//   wgmma_probe [iters=4096]   (prints one line per configuration: TFLOP/s of f16 products)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/wgmma.cuh"
#include "probe_timing.h"

namespace {

using namespace di::cuda;
using namespace di::cuda::mma;

constexpr int kSteps = 8;  // k16 steps per round: a 128-element chunk, as the MoE kernel waits once a chunk

template <int N>
__device__ __forceinline__ void mma_n(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b) {
    if constexpr (N == 64)
        wg::mma_m64n64k16(d, a, b);
    else
        wg::mma_m64n128k16(d, a, b);
}

// Each block: one warpgroup, a B tile of N rows x 128 f16 in shared memory (two 128-byte-swizzled halves of
// K, as moe_wgmma.cu stores a chunk), `iters` rounds of kSteps wgmma
// (each round's A fragments converted from fp4 words first when kConvert).
template <int N, bool kConvert>
__global__ void __launch_bounds__(128) probe_kernel(float* out, int iters, uint32_t seed) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t base = (wg::smem_addr(smem_raw) + 1023u) & ~1023u;
    uint8_t* smem = smem_raw + (base - wg::smem_addr(smem_raw));
    const int tid = threadIdx.x, lane = tid & 31, q = lane & 3;
    for (int i = tid; i < N * 128;
         i += 128)  // small f16 values, any layout: the rate does not depend on them
        reinterpret_cast<__half*>(smem)[i] = __float2half(float((i * 7 + seed) % 5) * 0.125f);
    wg::fence_proxy_async();
    __syncthreads();
    uint4 raw[2];
    raw[0] = make_uint4(seed * 0x9E3779B9u + tid, seed ^ 0x7f4a7c15u, tid * 0x85ebca6bu, seed + 17u);
    raw[1] = make_uint4(raw[0].y ^ 0x1234567u, raw[0].x + 3u, raw[0].w * 5u, raw[0].z ^ 0xabcdefu);
    const uint32_t m0 = fp4_multiplier(120u + (seed & 3u)), m1 = fp4_multiplier(121u);
    uint32_t af[kSteps][4];
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
        for (int r = 0; r < 4; ++r) af[s][r] = 0x3c003c00u;  // f16 1.0 pairs
    float acc[N / 2];
#pragma unroll
    for (int v = 0; v < N / 2; ++v) acc[v] = 0.0f;
    for (int it = 0; it < iters; ++it) {
        if (kConvert) {
#pragma unroll
            for (int i = 0; i < kSteps / 2; ++i) {  // the moe kernel's conversion, per k-step pair
                const uint32_t w0 = word_of(raw[0], i) + uint32_t(it), w1 = word_of(raw[1], i);
                af[2 * i][0] = hmul2_bits(fp4_pair<0>(w0), m0),
                       af[2 * i][1] = hmul2_bits(fp4_pair<0>(w1), m1);
                af[2 * i][2] = hmul2_bits(fp4_pair<1>(w0), m0),
                       af[2 * i][3] = hmul2_bits(fp4_pair<1>(w1), m1);
                af[2 * i + 1][0] = hmul2_bits(fp4_pair<2>(w0), m0);
                af[2 * i + 1][1] = hmul2_bits(fp4_pair<2>(w1), m1);
                af[2 * i + 1][2] = hmul2_bits(fp4_pair<3>(w0), m0);
                af[2 * i + 1][3] = hmul2_bits(fp4_pair<3>(w1), m1);
            }
        }
        wg::fence();
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
            mma_n<N>(acc, af[s], wg::desc_k_major_sw128(base + (s >> 2) * (N * 128) + (s & 3) * 32));
        wg::commit();
        wg::wait<0>();
    }
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < N / 2; ++v) sum += acc[v];
    if (sum == 12345.678f) out[blockIdx.x * 128 + tid] = sum + float(q);  // never true: keeps the work
}

template <int N, bool kConvert>
void run(int sms, int iters, float* out) {
    const int smem = N * 256 + 1024;
    cudaFuncSetAttribute(probe_kernel<N, kConvert>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    for (int per_sm : {1, 2, 3, 4}) {
        const int blocks = sms * per_sm;
        const float ms = probe_ms(iters, [&](int n, uint32_t seed) {
            probe_kernel<N, kConvert><<<blocks, 128, smem>>>(out, n, seed);
        });
        const double flop = 2.0 * 64.0 * N * 16.0 * kSteps * double(iters) * blocks;
        std::printf("wgmma m64n%dk16, A from registers%s, %d block(s) an SM: %.1f TFLOP/s (%.3f ms)\n", N,
                    kConvert ? " converted from fp4 each round" : "", per_sm, flop / (ms * 1e-3) / 1e12, ms);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const int iters = argc > 1 ? std::atoi(argv[1]) : 4096;
    float* out = nullptr;
    const int sms = probe_device("wgmma_probe", &out);
    if (sms == 0) return 1;
    run<64, false>(sms, iters, out);
    run<64, true>(sms, iters, out);
    run<128, false>(sms, iters, out);
    run<128, true>(sms, iters, out);
    return probe_done("wgmma_probe", out);
}
