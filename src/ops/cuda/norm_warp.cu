// rms_norm and the fused rms_norm + rope for rows of at most 512 elements, a warp a row: lane l holds columns
// 128 i + 4 l .. + 3 (float4 loads and stores), the sum of squares over them in that order, then a warp's
// shuffle tree, with no block barrier. A block a row (elementwise.cu) spends its time on the barriers and the
// block switches at a prefill's size (q: 262,144 rows of 512 a V4-Flash layer at 4,096 tokens) where these
// run at the bandwidth. rope's cos / sin depend on the token and the column only: a warp takes up to four
// heads of one token and computes them once. Both kernels share the norm's code, so the fused kernel keeps
// the bits of rms_norm then rope.
#include <algorithm>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/norm_warp.h"

namespace di::cuda {
namespace {

// Warps a block: three blocks an SM (the rope kernel of 512-wide rows takes ~140 registers).
constexpr int kWarps = 4;
constexpr int kMaxRows = 4;  // rows a warp (their loads issued together)

// A rope job's rows a warp: up to kMaxRows heads of one token (their cos / sin computed once).
__host__ __device__ __forceinline__ int rows_a_warp(int64_t heads) {
    return int(heads < kMaxRows ? heads : kMaxRows);
}

// The lane's 4V values of a row (zeros past d).
template <int V>
__device__ __forceinline__ void load_row(const float* xr, int64_t d, float (&v)[V][4]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const int64_t c = 128 * i + 4 * lane;
        const float4 f = c < d ? __ldg(reinterpret_cast<const float4*>(xr + c)) : make_float4(0, 0, 0, 0);
        v[i][0] = f.x, v[i][1] = f.y, v[i][2] = f.z, v[i][3] = f.w;
    }
}

template <int V>
__device__ __forceinline__ void load_weight(const void* w, Fdt wdt, int64_t d, float (&wv)[V][4]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t c = 128 * i + 4 * lane + e;
            wv[i][e] = w != nullptr && c < d ? load_f(w, wdt, c) : 1.0f;
        }
}

// v := v * f32(1 / sqrt(mean(v^2) + eps)) * w, the sum of squares in double.
template <int V>
__device__ __forceinline__ void norm_row(float (&v)[V][4], const float (&wv)[V][4], int64_t d, float eps) {
    double ss = 0;
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) ss += double(v[i][e]) * v[i][e];
    ss = warp_sum_d(ss);
    const float inv = float(1.0 / sqrt(ss / double(d) + double(eps)));
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) v[i][e] = v[i][e] * inv * wv[i][e];
}

template <int V>
__device__ __forceinline__ void store_row(float* yr, int64_t d, const float (&v)[V][4]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const int64_t c = 128 * i + 4 * lane;
        if (c < d) *reinterpret_cast<float4*>(yr + c) = make_float4(v[i][0], v[i][1], v[i][2], v[i][3]);
    }
}

// Rows gw * R .. + R - 1 of warp gw.
template <int V>
__global__ void __launch_bounds__(32 * kWarps, 3)
    rms_norm_warp_kernel(const float* x, int64_t ldx, const void* w, Fdt wdt, float* y, int64_t ldy,
                         int64_t n, int64_t d, float eps, int R) {
    allow_early_next();
    const int64_t r0 = (int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * R;
    if (r0 >= n) return;
    float v[kMaxRows][V][4], wv[V][4];
#pragma unroll
    for (int k = 0; k < kMaxRows; ++k)
        if (k < R && r0 + k < n) load_row<V>(x + (r0 + k) * ldx, d, v[k]);
    load_weight<V>(w, wdt, d, wv);
#pragma unroll
    for (int k = 0; k < kMaxRows; ++k)
        if (k < R && r0 + k < n) {
            norm_row<V>(v[k], wv, d, eps);
            store_row<V>(y + (r0 + k) * ldy, d, v[k]);
        }
}

// rope's factors of the lane's pairs (columns 128 i + 4 l + 2 p, p < 2) for position pos; zero where the
// column is not rotated.
template <int V>
struct RopeFactors {
    RopeCs f[V][2];
};

template <int V>
__device__ __forceinline__ RopeFactors<V> rope_factors(const RopeParams& rp, float pos) {
    const int lane = threadIdx.x & 31;
    const int64_t off = rp.hd - 2 * rp.half;
    RopeFactors<V> f;
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            const int64_t c = 128 * i + 4 * lane + 2 * p;
            f.f[i][p] = c >= off && c < rp.hd
                            ? rope_cs(pos * __ldg(rp.inv_freq + ((c - off) >> 1)), rp.mscale, rp.inverse)
                            : RopeCs{0.0f, 0.0f};
        }
    return f;
}

template <int V>
__device__ __forceinline__ void rotate_row(float (&v)[V][4], const RopeFactors<V>& f, const RopeParams& rp) {
    const int lane = threadIdx.x & 31;
    const int64_t off = rp.hd - 2 * rp.half;
#pragma unroll
    for (int i = 0; i < V; ++i)
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            const int64_t c = 128 * i + 4 * lane + 2 * p;
            if (c < off || c >= rp.hd) continue;
            const float u = v[i][2 * p], w = v[i][2 * p + 1];
            v[i][2 * p] = rope_first(u, w, f.f[i][p]);
            v[i][2 * p + 1] = rope_second(u, w, f.f[i][p]);
        }
}

// Warp gw of the job: heads h0 .. h0 + R - 1 of token t (G = ceil(heads / R) groups a token).
template <int V>
__device__ __forceinline__ void norm_rope_warp(const float* x, int64_t ldx, const NormOut& norm,
                                               const RopeParams& rp, int R, int64_t gw) {
    const int64_t G = (rp.heads + R - 1) / R, t = gw / G, h0 = (gw % G) * R;
    if (t >= rp.n) return;
    const int64_t r0 = t * rp.heads + h0;
    const int rows = int(min(int64_t(R), rp.heads - h0));
    float v[kMaxRows][V][4], wv[V][4];
#pragma unroll
    for (int k = 0; k < kMaxRows; ++k)
        if (k < rows) load_row<V>(x + (r0 + k) * ldx, rp.hd, v[k]);
    load_weight<V>(norm.w, norm.wdt, rp.hd, wv);
    const RopeFactors<V> f = rope_factors<V>(rp, float(rp.pos[t]));
#pragma unroll
    for (int k = 0; k < kMaxRows; ++k)
        if (k < rows) {
            norm_row<V>(v[k], wv, rp.hd, norm.eps);
            rotate_row<V>(v[k], f, rp);
            store_row<V>(norm.y + (r0 + k) * norm.ld_y, rp.hd, v[k]);
        }
}

template <int V>
__global__ void __launch_bounds__(32 * kWarps, 3)
    rms_norm_rope_warp_kernel(const float* x, int64_t ldx, NormOut norm, RopeParams rp, int R) {
    allow_early_next();
    norm_rope_warp<V>(x, ldx, norm, rp, R, int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5));
}

// Job blockIdx.y of a batch (each its own R: rows_a_warp); Jobs a device table (const NormRopeJob*) or the
// jobs themselves (NormRopeJobs).
template <int V, class Jobs>
__global__ void __launch_bounds__(32 * kWarps, 3)
    rms_norm_ropes_warp_kernel(const __grid_constant__ Jobs jobs) {
    allow_early_next();
    const NormRopeJob& j = jobs[blockIdx.y];
    const int R = rows_a_warp(j.rope.heads);
    norm_rope_warp<V>(j.x, j.ldx, j.norm, j.rope, R, int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5));
}

int vec_per_lane(int64_t d) { return d <= 128 ? 1 : d <= 256 ? 2 : 4; }

bool aligned(const void* p, int64_t ld) { return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % 4 == 0; }

int64_t warps_of(const RopeParams& rp, int R) { return rp.n * ((rp.heads + R - 1) / R); }

}  // namespace

bool norm_warp_ok(const float* x, int64_t ldx, const float* y, int64_t ldy, int64_t d) {
    return d > 0 && d <= kNormWarpMaxD && d % 4 == 0 && aligned(x, ldx) && aligned(y, ldy);
}

void launch_rms_norm_warp(const float* x, int64_t ldx, const void* w, Fdt wdt, float* y, int64_t ldy,
                          int64_t n, int64_t d, float eps, cudaStream_t st) {
    const int R = n >= 4096 ? kMaxRows : 1;  // a few rows a warp where there are enough rows to fill the GPU
    const unsigned blocks = unsigned((n + int64_t(kWarps) * R - 1) / (int64_t(kWarps) * R));
    switch (vec_per_lane(d)) {
        case 1:
            return rms_norm_warp_kernel<1>
                <<<blocks, 32 * kWarps, 0, st>>>(x, ldx, w, wdt, y, ldy, n, d, eps, R);
        case 2:
            return rms_norm_warp_kernel<2>
                <<<blocks, 32 * kWarps, 0, st>>>(x, ldx, w, wdt, y, ldy, n, d, eps, R);
        default:
            return rms_norm_warp_kernel<4>
                <<<blocks, 32 * kWarps, 0, st>>>(x, ldx, w, wdt, y, ldy, n, d, eps, R);
    }
}

bool norm_rope_warp_ok(const float* x, int64_t ldx, const NormOut& norm, const RopeParams& rp) {
    return norm_warp_ok(x, ldx, norm.y, norm.ld_y, rp.hd) && rp.hd % 2 == 0 && 2 * rp.half <= rp.hd;
}

void launch_rms_norm_rope_warp(const float* x, int64_t ldx, const NormOut& norm, const RopeParams& rp,
                               cudaStream_t st) {
    const int R = rows_a_warp(rp.heads);
    const unsigned blocks = unsigned((warps_of(rp, R) + kWarps - 1) / kWarps);
    switch (vec_per_lane(rp.hd)) {
        case 1:
            return rms_norm_rope_warp_kernel<1><<<blocks, 32 * kWarps, 0, st>>>(x, ldx, norm, rp, R);
        case 2:
            return rms_norm_rope_warp_kernel<2><<<blocks, 32 * kWarps, 0, st>>>(x, ldx, norm, rp, R);
        default:
            return rms_norm_rope_warp_kernel<4><<<blocks, 32 * kWarps, 0, st>>>(x, ldx, norm, rp, R);
    }
}

namespace {

// The batch's launch: grid (the most warps a job needs, the job count); the lanes' vector width from the
// widest row (every job of the q / kv and compressor batches is 512 wide, so each keeps its own call's
// width).
template <class Jobs>
void launch_ropes(const Jobs& jobs, const NormRopeJob* host, int64_t count, cudaStream_t st) {
    int64_t warps = 0, hd = 0;
    for (int64_t i = 0; i < count; ++i) {
        const RopeParams& rp = host[i].rope;
        warps = std::max(warps, warps_of(rp, rows_a_warp(rp.heads)));
        hd = std::max(hd, rp.hd);
    }
    if (warps == 0) return;
    const dim3 grid(unsigned((warps + kWarps - 1) / kWarps), unsigned(count));
    switch (vec_per_lane(hd)) {
        case 1:
            return rms_norm_ropes_warp_kernel<1, Jobs><<<grid, 32 * kWarps, 0, st>>>(jobs);
        case 2:
            return rms_norm_ropes_warp_kernel<2, Jobs><<<grid, 32 * kWarps, 0, st>>>(jobs);
        default:
            return rms_norm_ropes_warp_kernel<4, Jobs><<<grid, 32 * kWarps, 0, st>>>(jobs);
    }
}

}  // namespace

void launch_rms_norm_ropes_warp(const NormRopeJob* dev, const NormRopeJob* host, int64_t count,
                                cudaStream_t st) {
    launch_ropes(dev, host, count, st);
}

void launch_rms_norm_ropes_warp(const NormRopeJobs& jobs, cudaStream_t st) {
    launch_ropes(jobs, jobs.job, jobs.count, st);
}

}  // namespace di::cuda
