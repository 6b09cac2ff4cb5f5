// Linear y = x W^T with W dequantised inside the kernel (dense f32/bf16/f16, fp8 128x128 blocks, fp4 per-32).
// f32 paths, deterministic (fixed accumulation order, no atomics):
//   n <= 16 rows (decode): the streaming GEMV of gemv.cu (16-byte weight units)
//   warp GEMV: one warp per output row (the first decode kernel; the fallback where gemv.cu does not apply)
//   n > 16 (prefill): 64x64 output tiles, 32-wide K slices dequantised into shared memory, f32 FMA
// Batch invariance: a row's result depends on which path n selects (the K order differs between them).
#include "ops/cuda/device_util.cuh"

namespace di::cuda {
namespace {

constexpr int kGemvRows = 8;

template <bool kVec>
__global__ void __launch_bounds__(256)
    gemv_kernel(const float* x, int64_t ldx, WeightRef w, float* y, int64_t ldy, int64_t n) {
    allow_early_next();
    const int lane = threadIdx.x & 31;
    const int64_t o = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (o >= w.out_dim) return;
    const int64_t K = w.in_dim;
    for (int64_t r0 = 0; r0 < n; r0 += kGemvRows) {
        const int nr = int(min(int64_t(kGemvRows), n - r0));
        float acc[kGemvRows];
#pragma unroll
        for (int r = 0; r < kGemvRows; ++r) acc[r] = 0.0f;
        if (kVec) {
            for (int64_t i = int64_t(lane) * 8; i < K; i += 256) {
                float v[8];
                weight_at8(w, o, i, v);
#pragma unroll
                for (int r = 0; r < kGemvRows; ++r) {
                    if (r < nr) {
                        const float4* xp = reinterpret_cast<const float4*>(x + (r0 + r) * ldx + i);
                        const float4 a = xp[0], b = xp[1];
                        acc[r] += a.x * v[0] + a.y * v[1] + a.z * v[2] + a.w * v[3] + b.x * v[4] +
                                  b.y * v[5] + b.z * v[6] + b.w * v[7];
                    }
                }
            }
        } else {
            for (int64_t i = lane; i < K; i += 32) {
                const float v = weight_at(w, o, i);
#pragma unroll
                for (int r = 0; r < kGemvRows; ++r)
                    if (r < nr) acc[r] += x[(r0 + r) * ldx + i] * v;
            }
        }
#pragma unroll
        for (int r = 0; r < kGemvRows; ++r) {
            const float s = warp_sum(acc[r]);
            if (lane == 0 && r < nr) y[(r0 + r) * ldy + o] = s;
        }
    }
}

constexpr int kBM = 64, kBN = 64, kBK = 32;

template <bool kVec>
__global__ void __launch_bounds__(256)
    tiled_kernel(const float* x, int64_t ldx, WeightRef w, float* y, int64_t ldy, int64_t n) {
    allow_early_next();
    __shared__ float xs[kBK][kBM + 4];
    __shared__ float ws[kBK][kBN + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t row0 = int64_t(blockIdx.y) * kBM, col0 = int64_t(blockIdx.x) * kBN, K = w.in_dim;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < K; k0 += kBK) {
        {  // x tile: 64 rows x 32 k, 8 per thread (thread -> row tid/4, k (tid%4)*8)
            const int r = tid / 4, kk = (tid % 4) * 8;
            const int64_t gr = row0 + r;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int64_t gk = k0 + kk + j;
                xs[kk + j][r] = (gr < n && gk < K) ? x[gr * ldx + gk] : 0.0f;
            }
        }
        {  // w tile: 64 outputs x 32 k, one 8-group per thread
            const int c = tid / 4, kk = (tid % 4) * 8;
            const int64_t gc = col0 + c, gk = k0 + kk;
            float v[8];
            if (kVec && gc < w.out_dim && gk + 8 <= K) {
                weight_at8(w, gc, gk, v);
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    v[j] = (gc < w.out_dim && gk + j < K) ? weight_at(w, gc, gk + j) : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) ws[kk + j][c] = v[j];
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < kBK; ++kk) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = ws[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t gr = row0 + ty + 16 * i;
        if (gr >= n) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t gc = col0 + tx + 16 * j;
            if (gc < w.out_dim) y[gr * ldy + gc] = acc[i][j];
        }
    }
}

}  // namespace

void launch_linear(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n,
                   Stream s, LinearVariant v) {
    if (n == 0 || w.out_dim == 0) return;
    if (v == LinearVariant::kAuto)
        v = gemv_split_supported(x, ldx, w, n) ? LinearVariant::kSplitRows
            : gemv_supported(x, ldx, w, n)     ? LinearVariant::kStreamGemv
            : n <= kGemvRows                   ? LinearVariant::kWarpGemv
                                               : LinearVariant::kTiled;
    if (v == LinearVariant::kCublasLtFp8 || v == LinearVariant::kCublasLtBf16x3 || v == LinearVariant::kMma ||
        v == LinearVariant::kGemm) {
        std::fprintf(stderr, "deepinfer: linear variants cublaslt_* and mma have their own launchers\n");
        std::abort();
    }
    if (v == LinearVariant::kSplitRows) {
        if (!gemv_split_supported(x, ldx, w, n)) {
            std::fprintf(stderr, "deepinfer: linear variant split_rows forced on an unsupported shape\n");
            std::abort();
        }
        return launch_gemv_split(x, ldx, w, y, ldy, n, s);
    }
    if (v == LinearVariant::kStreamGemv) {
        if (!gemv_supported(x, ldx, w, n)) {
            std::fprintf(stderr, "deepinfer: linear variant stream_gemv forced on an unsupported shape\n");
            std::abort();
        }
        return launch_gemv(x, ldx, w, y, ldy, n, s);
    }
    const bool vec = weight_vec8_ok(w);
    if (v == LinearVariant::kWarpGemv) {  // any n: the kernel walks the rows 8 at a time
        // float4 loads of x need 16-byte aligned rows as well
        const bool xvec = vec && reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
        const dim3 grid(blocks_for(w.out_dim, 8));
        if (xvec)
            gemv_kernel<true><<<grid, 256, 0, as_stream(s)>>>(x, ldx, w, y, ldy, n);
        else
            gemv_kernel<false><<<grid, 256, 0, as_stream(s)>>>(x, ldx, w, y, ldy, n);
        return;
    }
    const dim3 grid(blocks_for(w.out_dim, kBN), blocks_for(n, kBM));
    if (vec)
        tiled_kernel<true><<<grid, 256, 0, as_stream(s)>>>(x, ldx, w, y, ldy, n);
    else
        tiled_kernel<false><<<grid, 256, 0, as_stream(s)>>>(x, ldx, w, y, ldy, n);
}

}  // namespace di::cuda
