// Decode linear (n <= 16 token rows): y = x W^T with the weight streamed once in 16-byte units
// (gemv.cuh). A block of 8 warps covers 8 / W row groups of R = 4 rows; the W warps of a group split K
// and their partial sums are added in warp order, so the result is deterministic. Tokens are taken NT at a
// time; the weight is re-read for each pass (from L1/L2 for the rows just read).
//   bytes: out * in * bytes/weight + x + y  -> bound by the weight read for n <= 4
#include "ops/cuda/gemv.cuh"

namespace di::cuda {
namespace {

using namespace gemv;

constexpr int kRows = 4, kWarps = 8;

struct GemvParams {
    const float* x;
    int64_t ldx;
    WeightRef w;
    float* y;
    int64_t ldy;
    int64_t n;
    int warps_per_row;  // W: 1, 2, 4 or 8
};

template <int F, int NT>
__global__ void __launch_bounds__(256) gemv_kernel(GemvParams p) {
    __shared__ float red[kWarps][kRows][NT];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int W = p.warps_per_row, group = warp / W, wi = warp % W;
    const int64_t o0 = (int64_t(blockIdx.x) * (kWarps / W) + group) * kRows;
    for (int64_t t0 = 0; t0 < p.n; t0 += NT) {
        const int nt = int(min(int64_t(NT), p.n - t0));
        const float* xs[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) xs[t] = p.x + (t0 + min(t, nt - 1)) * p.ldx;
        float acc[kRows][NT];
        rows_partial<F, NT, kRows>(p.w, o0, xs, nt, int64_t(wi) * 32 + lane, int64_t(W) * 32, acc);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const float v = warp_sum(acc[r][t]);
                if (lane == 0) red[warp][r][t] = v;
            }
        __syncthreads();
        if (wi == 0 && lane < kRows * NT) {
            const int r = lane / NT, t = lane % NT;
            if (t < nt && o0 + r < p.w.out_dim) {
                float s = 0.0f;
                for (int i = 0; i < W; ++i) s += red[group * W + i][r][t];
                p.y[(t0 + t) * p.ldy + o0 + r] = s;
            }
        }
        __syncthreads();
    }
}

}  // namespace

int sm_count() {
    static const int n = [] {
        int dev = 0, v = 0;
        DI_CUDA_CHECK(cudaGetDevice(&dev));
        DI_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
        return v;
    }();
    return n;
}

namespace {

int format_of(const WeightRef& w) {
    if (w.format == 1) return kFp8;
    if (w.format == 2) return kFp4;
    return w.dense_dt == Fdt::kF32 ? kF32 : w.dense_dt == Fdt::kBF16 ? kBF16 : kF16;
}

int elems_of(int f) { return f == kF32 ? 4 : f == kFp8 ? 16 : f == kFp4 ? 32 : 8; }

int64_t bytes_per_row(const WeightRef& w, int f) {
    return f == kF32 ? w.ld * 4 : (f == kBF16 || f == kF16) ? w.ld * 2 : w.ld;
}

template <int F>
void launch_f(const GemvParams& p, unsigned blocks, cudaStream_t s) {
    if (p.n == 1) gemv_kernel<F, 1><<<blocks, 256, 0, s>>>(p);
    else if (p.n == 2) gemv_kernel<F, 2><<<blocks, 256, 0, s>>>(p);
    else gemv_kernel<F, 4><<<blocks, 256, 0, s>>>(p);
}

}  // namespace

int gemv_format(const WeightRef& w) {
    const int f = format_of(w);
    const bool ok = w.in_dim % elems_of(f) == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
                    bytes_per_row(w, f) % 16 == 0;
    return ok ? f : -1;
}

bool gemv_supported(const float* x, int64_t ldx, const WeightRef& w, int64_t n) {
    return n >= 1 && n <= kGemvMaxRows && gemv_format(w) >= 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
           ldx % 4 == 0;
}

int gemv_warps_per_row(int64_t units, int64_t out_dim, int rows_per_group) {
    auto blocks = [&](int W) { return (out_dim + int64_t(rows_per_group) * (8 / W) - 1) / (int64_t(rows_per_group) * (8 / W)); };
    // Enough threads per row that every thread has a unit; fewer when rows alone fill the GPU twice over
    // (then each thread streams several units and the cross-warp sum is cheaper).
    int W = 8;
    while (W > 1 && units < 32 * W) W /= 2;
    while (W > 1 && blocks(W / 2) >= 2 * sm_count() && units < 64 * W) W /= 2;
    return W;
}

void launch_gemv(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n, Stream s) {
    const int f = format_of(w);
    const int W = gemv_warps_per_row(w.in_dim / elems_of(f), w.out_dim, kRows);
    const GemvParams p{x, ldx, w, y, ldy, n, W};
    const unsigned grid = unsigned((w.out_dim + kRows * (kWarps / W) - 1) / (kRows * (kWarps / W)));
    switch (f) {
        case kF32: launch_f<kF32>(p, grid, as_stream(s)); break;
        case kBF16: launch_f<kBF16>(p, grid, as_stream(s)); break;
        case kF16: launch_f<kF16>(p, grid, as_stream(s)); break;
        case kFp8: launch_f<kFp8>(p, grid, as_stream(s)); break;
        default: launch_f<kFp4>(p, grid, as_stream(s)); break;
    }
}

}  // namespace di::cuda
