// Decode linear (n <= 16 token rows): y = x W^T with the weight streamed once in 16-byte units
// (gemv.cuh). Each warp owns R whole rows (R = 4, 2 or 1: the most that still leaves 16 warps per
// multiprocessor), so no cross-warp sum is needed and the result is deterministic; lanes keep U units of
// every row in flight (more when R is small, so a warp always has 8-16 loads outstanding). Tokens are taken
// NT at a time; the weight is re-read for each pass. The token rows of a pass sit in shared memory
// (gemv.cuh), staged once per persistent block.
//   bytes: out * in * bytes/weight + x + y  -> bound by the weight read for n <= 4
#include "ops/cuda/gemv.cuh"

namespace di::cuda {
namespace {

using namespace gemv;

constexpr int kWarps = 8;

struct GemvParams {
    const float* x;
    int64_t ldx;
    WeightRef w;
    float* y;
    int64_t ldy;
    int64_t n;
    bool quant;  // the staged rows quantised as the native precision's activations (quantise_staged)
};

// Persistent blocks: each stages NT token rows in shared memory, then its warps walk the row groups
// blockIdx.x * 8 + warp, + gridDim.x * 8, ...
template <int F, int NT, int R>
__global__ void __launch_bounds__(256) gemv_kernel(GemvParams p) {
    allow_early_next();
    extern __shared__ float4 smem4[];
    float* xsm = reinterpret_cast<float*>(smem4);
    // Fewer units in flight when the token passes hold more registers; more when the warp has one row.
    constexpr int U = NT == 4 ? 2 : NT == 2 ? 4 : R == 1 ? 8 : 4;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t groups = (p.w.out_dim + R - 1) / R;
    {  // started early (early_launch.cuh): the warp's first rows head for L2 before it waits for x
        const int64_t g = int64_t(blockIdx.x) * kWarps + warp, rb = row_bytes(p.w, F);
        const auto* base = static_cast<const char*>(p.w.data);
        for (int r = 0; r < R && g * R + r < p.w.out_dim; ++r)
            for (int64_t off = int64_t(lane) * 128; off < rb; off += 32 * 128)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(base + (g * R + r) * rb + off));
    }
    wait_prior();
    for (int64_t t0 = 0; t0 < p.n; t0 += NT) {
        const int nt = int(min(int64_t(NT), p.n - t0));
        const float* xg[NT];
#pragma unroll
        for (int t = 0; t < NT; ++t) xg[t] = p.x + (t0 + min(t, nt - 1)) * p.ldx;
        if (t0 > 0) __syncthreads();  // every warp is done with the previous tokens
        stage_x<F, NT>(xg, nt, p.w.in_dim, xsm);
        __syncthreads();
        if (p.quant) {  // uniform over the launch
            quantise_staged<F, NT>(xsm, nt, p.w.in_dim);
            __syncthreads();
        }
        for (int64_t g = int64_t(blockIdx.x) * kWarps + warp; g < groups; g += int64_t(gridDim.x) * kWarps) {
            const int64_t o0 = g * R;
            float acc[R][NT];
            warp_rows<F, NT, R, U>(p.w, o0, xsm, nt, acc);
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t)
                    if (lane == r * NT + t && t < nt && o0 + r < p.w.out_dim)
                        p.y[(t0 + t) * p.ldy + o0 + r] = acc[r][t];
        }
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

int gemv_rows_per_warp(int64_t out_dim) {
    const int64_t want = 16 * int64_t(sm_count()) * kWarps / 8;  // 16 warps per multiprocessor
    return out_dim >= 4 * want ? 4 : out_dim >= 2 * want ? 2 : 1;
}

namespace {

int format_of(const WeightRef& w) {
    if (w.format == 1) return kFp8;
    if (w.format == 2) return kFp4;
    return w.dense_dt == Fdt::kF32 ? kF32 : w.dense_dt == Fdt::kBF16 ? kBF16 : kF16;
}

template <int F, int NT, int R>
void launch_k(const GemvParams& p, cudaStream_t s) {
    const size_t smem = size_t(NT * staged_floats<F>(p.w.in_dim)) * sizeof(float);
    const int64_t groups = (p.w.out_dim + R - 1) / R, wanted = (groups + kWarps - 1) / kWarps;
    const int64_t resident = int64_t(resident_blocks(gemv_kernel<F, NT, R>, smem)) * sm_count();
    launch_early(gemv_kernel<F, NT, R>, dim3(unsigned(std::min(wanted, resident))), dim3(256), smem, s, p);
}

template <int F, int R>
void launch_fr(const GemvParams& p, cudaStream_t s) {
    if (p.n == 1)
        launch_k<F, 1, R>(p, s);
    else if (p.n == 2)
        launch_k<F, 2, R>(p, s);
    else
        launch_k<F, 4, R>(p, s);
}

template <int F>
void launch_f(const GemvParams& p, cudaStream_t s) {
    switch (gemv_rows_per_warp(p.w.out_dim)) {
        case 4:
            return launch_fr<F, 4>(p, s);
        case 2:
            return launch_fr<F, 2>(p, s);
        default:
            return launch_fr<F, 1>(p, s);
    }
}

}  // namespace

int gemv_format(const WeightRef& w) {
    const int f = format_of(w);
    const bool ok = w.in_dim % unit_elems(f) == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0 &&
                    row_bytes(w, f) % 16 == 0;
    return ok ? f : -1;
}

bool gemv_supported(const float* x, int64_t ldx, const WeightRef& w, int64_t n) {
    const int f = gemv_format(w);
    if (!(n >= 1 && n <= kGemvMaxRows && f >= 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0))
        return false;
    const int64_t nt = n == 1 ? 1 : n == 2 ? 2 : 4, e = unit_elems(f);
    return nt * (w.in_dim / e) * (e + 4) * int64_t(sizeof(float)) <= int64_t(kGemvMaxSmem);  // staged tokens
}

void launch_gemv(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n, Stream s,
                 bool quant) {
    const GemvParams p{x, ldx, w, y, ldy, n, quant};
    switch (format_of(w)) {
        case kF32:
            launch_f<kF32>(p, as_stream(s));
            break;
        case kBF16:
            launch_f<kBF16>(p, as_stream(s));
            break;
        case kF16:
            launch_f<kF16>(p, as_stream(s));
            break;
        case kFp8:
            launch_f<kFp8>(p, as_stream(s));
            break;
        default:
            launch_f<kFp4>(p, as_stream(s));
            break;
    }
}

}  // namespace di::cuda
