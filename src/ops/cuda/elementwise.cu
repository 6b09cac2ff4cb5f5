// Element-wise and row-wise kernels: embed, add, swiglu, rms_norm, rope, window_store, mhc_post, and the
// fused rms_norm + rope and add + mhc_post.
// All memory-bound: one pass over the inputs, f32 math (double where the reference rounds through double).
#include <algorithm>

#include "ops/cuda/device_util.cuh"
#include "ops/cuda/env_switch.h"
#include "ops/cuda/fused_kernels.h"
#include "ops/cuda/hc_streams.cuh"
#include "ops/cuda/norm_warp.h"

namespace di::cuda {
namespace {

template <class O>
__global__ void embed_kernel(const int32_t* tokens, const void* table, Fdt dt, int64_t ld_table,
                             int64_t vocab, int64_t dim, O* out, int64_t ld_out) {
    allow_early_next();
    const int64_t t = blockIdx.x;
    int32_t id = tokens[t];
    if (id < 0 || id >= vocab) id = 0;  // the host checked ids when it could; never read out of bounds
    for (int64_t c = blockIdx.y * int64_t(blockDim.x) + threadIdx.x; c < dim;
         c += int64_t(gridDim.y) * blockDim.x)
        hc::st1(out + t * ld_out + c, load_f(table, dt, id * ld_table + c));
}

template <class O>
__global__ void cast_kernel(const void* x, Fdt xdt, int64_t ld_x, O* out, int64_t ld_out, int64_t d) {
    allow_early_next();
    const int64_t r = blockIdx.x;
    for (int64_t c = blockIdx.y * int64_t(blockDim.x) + threadIdx.x; c < d;
         c += int64_t(gridDim.y) * blockDim.x)
        hc::st1(out + r * ld_out + c, load_f(x, xdt, r * ld_x + c));
}

__global__ void add_kernel(const float* a, int64_t lda, const float* b, int64_t ldb, float* out, int64_t ldo,
                           int64_t d) {
    allow_early_next();
    const int64_t r = blockIdx.x;
    for (int64_t c = blockIdx.y * int64_t(blockDim.x) + threadIdx.x; c < d;
         c += int64_t(gridDim.y) * blockDim.x)
        out[r * ldo + c] = a[r * lda + c] + b[r * ldb + c];
}

__global__ void swiglu_kernel(const float* g, int64_t ldg, const float* u, int64_t ldu, float* out,
                              int64_t ldo, int64_t d, float limit) {
    allow_early_next();
    const int64_t r = blockIdx.x;
    for (int64_t c = blockIdx.y * int64_t(blockDim.x) + threadIdx.x; c < d;
         c += int64_t(gridDim.y) * blockDim.x)
        out[r * ldo + c] = swiglu_clamped(g[r * ldg + c], u[r * ldu + c], limit);
}

// One block per row; sum of squares in double (as the reference) with a fixed reduction tree.
__global__ void rms_norm_kernel(const float* x, int64_t ldx, const void* w, Fdt wdt, float* y, int64_t ldy,
                                int64_t d, float eps) {
    allow_early_next();
    __shared__ double red[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + r * ldx;
    double ss = 0;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) ss += double(xr[c]) * xr[c];
    ss = block_sum_d(ss, red);
    const float inv = float(1.0 / sqrt(ss / double(d) + double(eps)));
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x)
        y[r * ldy + c] = xr[c] * inv * (w ? load_f(w, wdt, c) : 1.0f);
}

// The same for rows of at most 256 * kPer elements, held in registers between the two passes: every load
// (x and the weight) is issued before the first store, where the loop above re-reads x after each store
// of an in-place norm and so waits a memory latency per element a thread owns. Same sums, same order.
// On return v[i] holds y at column threadIdx.x + 256 i (0 past d).
template <int kPer>
__device__ __forceinline__ void rms_norm_regs(const float* xr, const void* w, Fdt wdt, int64_t d, float eps,
                                              float (&v)[kPer], double* red) {
    float wv[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int64_t c = threadIdx.x + 256 * int64_t(i);
        v[i] = c < d ? __ldg(xr + c) : 0.0f;
    }
    // one loop per weight dtype: a dtype switch inside the loop would keep each load behind a branch
    if (w == nullptr) {
#pragma unroll
        for (int i = 0; i < kPer; ++i) wv[i] = 1.0f;
    } else if (wdt == Fdt::kBF16) {
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
            const int64_t c = threadIdx.x + 256 * int64_t(i);
            wv[i] = c < d ? __bfloat162float(static_cast<const __nv_bfloat16*>(w)[c]) : 1.0f;
        }
    } else {
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
            const int64_t c = threadIdx.x + 256 * int64_t(i);
            wv[i] = c < d ? load_f(w, wdt, c) : 1.0f;
        }
    }
    double ss = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) ss += double(v[i]) * v[i];
    ss = block_sum_d(ss, red);
    const float inv = float(1.0 / sqrt(ss / double(d) + double(eps)));
#pragma unroll
    for (int i = 0; i < kPer; ++i) v[i] = v[i] * inv * wv[i];
}

template <int kPer>
__global__ void __launch_bounds__(256)
    rms_norm_reg_kernel(const float* x, int64_t ldx, const void* w, Fdt wdt, float* y, int64_t ldy, int64_t d,
                        float eps) {
    allow_early_next();
    __shared__ double red[32];
    const int64_t r = blockIdx.x;
    float v[kPer];
    rms_norm_regs<kPer>(x + r * ldx, w, wdt, d, eps, v, red);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int64_t c = threadIdx.x + 256 * int64_t(i);
        if (c < d) y[r * ldy + c] = v[i];
    }
}

// rms_norm of row r (block r), then rope's rotation of its last 2 * half columns: the pair (c, c + 1) sits
// in lanes (2j, 2j + 1) of one warp (c = threadIdx.x + 256 i, c - (hd - 2 half) even), so each lane takes
// its partner's normed value by one shuffle. The products are rope_kernel's, in the same order.
template <int kPer>
__device__ __forceinline__ void rms_norm_rope_row(const float* x, int64_t ldx, const NormOut& norm,
                                                  const RopeParams& rp, int64_t r, double* red) {
    const int64_t t = r / rp.heads, off = rp.hd - 2 * rp.half;
    const float pos = float(rp.pos[t]);
    float f[kPer];  // each column's inverse frequency, loaded before the norm's reduction
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int64_t c = threadIdx.x + 256 * int64_t(i);
        f[i] = c >= off && c < rp.hd ? __ldg(rp.inv_freq + ((c - off) >> 1)) : 0.0f;
    }
    float v[kPer];
    rms_norm_regs<kPer>(x + r * ldx, norm.w, norm.wdt, rp.hd, norm.eps, v, red);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int64_t c = threadIdx.x + 256 * int64_t(i);
        const float other = __shfl_xor_sync(0xffffffffu, v[i], 1);
        if (c >= off && c < rp.hd) {
            const RopeCs cs = rope_cs(pos * f[i], rp.mscale, rp.inverse);
            v[i] = (c & 1) == 0 ? rope_first(v[i], other, cs) : rope_second(other, v[i], cs);
        }
        if (c < rp.hd) norm.y[r * norm.ld_y + c] = v[i];
    }
}

template <int kPer>
__global__ void __launch_bounds__(256)
    rms_norm_rope_kernel(const float* x, int64_t ldx, NormOut norm, RopeParams rp) {
    allow_early_next();
    __shared__ double red[32];
    rms_norm_rope_row<kPer>(x, ldx, norm, rp, blockIdx.x, red);
}

// Job blockIdx.y of a batch, its row blockIdx.x; blocks past the job's rows return at once.
template <int kPer>
__global__ void __launch_bounds__(256) rms_norm_ropes_kernel(const NormRopeJob* jobs) {
    allow_early_next();
    __shared__ double red[32];
    const NormRopeJob& j = jobs[blockIdx.y];
    if (int64_t(blockIdx.x) < j.rope.n * j.rope.heads)
        rms_norm_rope_row<kPer>(j.x, j.ldx, j.norm, j.rope, blockIdx.x, red);
}

// One thread per (row, group of kRopeHeads heads, pair): the angle's cos / sin (double) once for the group's
// heads. A thread per (row, head, pair) spent its time on those: 8.4 M of them for a 4,096-token prefill's 64
// heads where 131 K differ.
constexpr int kRopeHeads = 8;
__global__ void rope_kernel(RopeParams p) {
    allow_early_next();
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    const int64_t G = (p.heads + kRopeHeads - 1) / kRopeHeads;
    const int64_t pair = i % p.half, hg = (i / p.half) % G, t = i / (p.half * G);
    if (t >= p.n) return;
    const RopeCs cs = rope_cs(float(p.pos[t]) * p.inv_freq[pair], p.mscale, p.inverse);
    float* x0 = p.x + t * p.s0 + (p.hd - 2 * p.half) + 2 * pair;
    const int64_t h0 = hg * kRopeHeads;
    float u[kRopeHeads], v[kRopeHeads];
#pragma unroll
    for (int k = 0; k < kRopeHeads; ++k)
        if (h0 + k < p.heads) u[k] = x0[(h0 + k) * p.s1], v[k] = x0[(h0 + k) * p.s1 + 1];
#pragma unroll
    for (int k = 0; k < kRopeHeads; ++k)
        if (h0 + k < p.heads) {
            float* x = x0 + (h0 + k) * p.s1;
            x[0] = rope_first(u[k], v[k], cs);
            x[1] = rope_second(u[k], v[k], cs);
        }
}

__global__ void window_store_kernel(const float* kv, int64_t ld_kv, int64_t t0, int64_t hd, float* ring,
                                    int64_t ld_ring, int64_t ring_len, int64_t pos0) {
    allow_early_next();
    const int64_t t = t0 + blockIdx.x;
    float* dst = ring + ((pos0 + t) % ring_len) * ld_ring;
    for (int64_t c = threadIdx.x; c < hd; c += blockDim.x) dst[c] = kv[t * ld_kv + c];
}

// grid (rows, count): row blockIdx.x of job blockIdx.y's surviving rows (the last ring_len).
__global__ void window_stores_kernel(const WindowStoreJob* jobs) {
    allow_early_next();
    const WindowStoreJob& j = jobs[blockIdx.y];
    const int64_t t0 = j.L > j.ring_len ? j.L - j.ring_len : 0, t = t0 + blockIdx.x;
    if (t >= j.L) return;
    float* dst = j.ring + ((j.pos0 + t) % j.ring_len) * j.ld_ring;
    for (int64_t c = threadIdx.x; c < j.hd; c += blockDim.x) dst[c] = j.kv[t * j.ld_kv + c];
}

// out[t, k, c] = post[t, k] a[t, c] + sum_j comb[t, j, k] streams[t, j, c], in double as the reference.
// With b: a + b in f32 (add_kernel's sum) takes a's place and is written to `sum`.
// S: the streams' type (hc_streams.cuh), out's f32 sum rounded to it.
template <class S>
__global__ void mhc_post_kernel(const S* streams, const float* a, int64_t ld_a, const float* b, int64_t ld_b,
                                float* sum, int64_t ld_sum, const float* post, int64_t ld_post,
                                const float* comb, int64_t ld_comb, S* out, int64_t hc, int64_t D) {
    allow_early_next();
    const int64_t t = blockIdx.x;
    const S* st = streams + t * hc * D;
    for (int64_t c = blockIdx.y * int64_t(blockDim.x) + threadIdx.x; c < D;
         c += int64_t(gridDim.y) * blockDim.x) {
        float av = a[t * ld_a + c];
        if (b != nullptr) {
            av = av + b[t * ld_b + c];
            sum[t * ld_sum + c] = av;
        }
        const double sub = av;
        for (int64_t k = 0; k < hc; ++k) {
            double acc = double(post[t * ld_post + k]) * sub;
            for (int64_t j = 0; j < hc; ++j)
                acc += double(comb[t * ld_comb + j * hc + k]) * hc::ld1(st + j * D + c);
            hc::st1(out + t * hc * D + k * D + c, float(acc));
        }
    }
}

dim3 row_grid(int64_t rows, int64_t d, int threads) {
    return dim3(unsigned(rows), unsigned(std::min<int64_t>((d + threads - 1) / threads, 64)));
}

// The same for hc = 4 with 16-byte aligned rows: a thread owns four columns of every stream (float4 loads,
// all issued before any store, so out may alias streams and sum may alias a or b), post and comb widened to
// double once a block in shared memory rather than once an element: the f32 -> f64 conversions, not the
// bytes, set the time of the scalar kernel at a prefill's size. The same products and sums in the same order.
constexpr int kPostThreads = 128;
template <class S>
__global__ void __launch_bounds__(kPostThreads)
    mhc_post4_kernel(const S* streams, const float* a, int64_t ld_a, const float* b, int64_t ld_b, float* sum,
                     int64_t ld_sum, const float* post, int64_t ld_post, const float* comb, int64_t ld_comb,
                     S* out, int64_t D) {
    allow_early_next();
    __shared__ double pc[4 + 16];  // post[k], then comb[j * 4 + k]
    const int64_t t = blockIdx.x, c = 4 * (blockIdx.y * int64_t(kPostThreads) + threadIdx.x);
    if (threadIdx.x < 4)
        pc[threadIdx.x] = post[t * ld_post + threadIdx.x];
    else if (threadIdx.x < 20)
        pc[threadIdx.x] = comb[t * ld_comb + threadIdx.x - 4];
    float4 av{}, bv{}, st[4];
    const bool live = c < D;
    if (live) {
        av = *reinterpret_cast<const float4*>(a + t * ld_a + c);
        if (b != nullptr) bv = *reinterpret_cast<const float4*>(b + t * ld_b + c);
#pragma unroll
        for (int j = 0; j < 4; ++j) st[j] = hc::ld4(streams + (t * 4 + j) * D + c);
    }
    __syncthreads();
    if (!live) return;
    if (b != nullptr) {
        av = make_float4(av.x + bv.x, av.y + bv.y, av.z + bv.z, av.w + bv.w);
        *reinterpret_cast<float4*>(sum + t * ld_sum + c) = av;
    }
    const float* sv = &st[0].x;
    const float* avs = &av.x;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            double acc = pc[k] * double(avs[e]);
#pragma unroll
            for (int j = 0; j < 4; ++j) acc += pc[4 + j * 4 + k] * double(sv[j * 4 + e]);
            o[e] = float(acc);
        }
        hc::st4(out + (t * 4 + k) * D + c, make_float4(o[0], o[1], o[2], o[3]));
    }
}

bool mhc_post4_ok(const void* streams, const float* a, int64_t ld_a, const float* b, int64_t ld_b,
                  const float* sum, int64_t ld_sum, const void* out, int64_t hc, int64_t D) {
    const auto al = [](const void* p, int64_t ld) {
        return p == nullptr || (reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % 4 == 0);
    };
    return hc == 4 && D % 4 == 0 && al(streams, D) && al(out, D) && al(a, ld_a) && al(b, ld_b) &&
           al(sum, ld_sum);
}

void launch_post(const void* streams, const float* a, int64_t ld_a, const float* b, int64_t ld_b, float* sum,
                 int64_t ld_sum, const float* post, int64_t ld_post, const float* comb, int64_t ld_comb,
                 void* out, bool bf16, int64_t n, int64_t hc, int64_t D, cudaStream_t st) {
    hc::by_stream_type(bf16, [&](auto tag) {
        using S = typename decltype(tag)::type;
        const S* in = static_cast<const S*>(streams);
        S* o = static_cast<S*>(out);
        if (mhc_post4_ok(streams, a, ld_a, b, ld_b, sum, ld_sum, out, hc, D)) {
            const dim3 grid(unsigned(n), unsigned((D / 4 + kPostThreads - 1) / kPostThreads));
            mhc_post4_kernel<S><<<grid, kPostThreads, 0, st>>>(in, a, ld_a, b, ld_b, sum, ld_sum, post,
                                                               ld_post, comb, ld_comb, o, D);
            return;
        }
        mhc_post_kernel<S><<<row_grid(n, D, 256), 256, 0, st>>>(in, a, ld_a, b, ld_b, sum, ld_sum, post,
                                                                ld_post, comb, ld_comb, o, hc, D);
    });
}

}  // namespace

void launch_embed(const int32_t* tokens, int64_t n, const void* table, Fdt dt, int64_t ld_table,
                  int64_t vocab, int64_t dim, void* out, Fdt odt, int64_t ld_out, Stream s) {
    if (n == 0) return;
    hc::by_stream_type(odt == Fdt::kBF16, [&](auto tag) {
        using O = typename decltype(tag)::type;
        embed_kernel<O><<<row_grid(n, dim, 256), 256, 0, as_stream(s)>>>(tokens, table, dt, ld_table, vocab,
                                                                         dim, static_cast<O*>(out), ld_out);
    });
}

void launch_cast(const void* x, Fdt xdt, int64_t ld_x, void* out, Fdt odt, int64_t ld_out, int64_t n,
                 int64_t d, Stream s) {
    if (n == 0 || d == 0) return;
    hc::by_stream_type(odt == Fdt::kBF16, [&](auto tag) {
        using O = typename decltype(tag)::type;
        cast_kernel<O>
            <<<row_grid(n, d, 256), 256, 0, as_stream(s)>>>(x, xdt, ld_x, static_cast<O*>(out), ld_out, d);
    });
}

void launch_add(const float* a, int64_t lda, const float* b, int64_t ldb, float* out, int64_t ldo, int64_t n,
                int64_t d, Stream s) {
    if (n == 0 || d == 0) return;
    add_kernel<<<row_grid(n, d, 256), 256, 0, as_stream(s)>>>(a, lda, b, ldb, out, ldo, d);
}

void launch_swiglu(const float* g, int64_t ldg, const float* u, int64_t ldu, float* out, int64_t ldo,
                   int64_t n, int64_t d, float limit, Stream s) {
    if (n == 0 || d == 0) return;
    swiglu_kernel<<<row_grid(n, d, 256), 256, 0, as_stream(s)>>>(g, ldg, u, ldu, out, ldo, d, limit);
}

void launch_rms_norm(const float* x, int64_t ldx, const void* w, Fdt wdt, float* y, int64_t ldy, int64_t n,
                     int64_t d, float eps, Stream s) {
    if (n == 0) return;
    const cudaStream_t st = as_stream(s);
    if (norm_warp_ok(x, ldx, y, ldy, d))
        launch_rms_norm_warp(x, ldx, w, wdt, y, ldy, n, d, eps, st);
    else if (d <= 256 * 4)
        rms_norm_reg_kernel<4><<<unsigned(n), 256, 0, st>>>(x, ldx, w, wdt, y, ldy, d, eps);
    else if (d <= 256 * 16)
        rms_norm_reg_kernel<16><<<unsigned(n), 256, 0, st>>>(x, ldx, w, wdt, y, ldy, d, eps);
    else
        rms_norm_kernel<<<unsigned(n), 256, 0, st>>>(x, ldx, w, wdt, y, ldy, d, eps);
}

void launch_rope(const RopeParams& p, Stream s) {
    const int64_t threads = p.n * ((p.heads + kRopeHeads - 1) / kRopeHeads) * p.half;
    if (threads == 0) return;
    rope_kernel<<<blocks_for(threads, 256), 256, 0, as_stream(s)>>>(p);
}

void launch_window_stores(const WindowStoreJob* jobs, int64_t count, Scratch& scratch, Stream s) {
    if (count == 1) {
        const WindowStoreJob& j = jobs[0];
        const int64_t t0 = j.L > j.ring_len ? j.L - j.ring_len : 0;  // only the last ring_len rows survive
        if (j.L - t0 > 0)
            window_store_kernel<<<dim3(unsigned(j.L - t0)), 256, 0, as_stream(s)>>>(
                j.kv, j.ld_kv, t0, j.hd, j.ring, j.ld_ring, j.ring_len, j.pos0);
        return;
    }
    int64_t rows = 0;
    for (int64_t i = 0; i < count; ++i) rows = std::max(rows, std::min(jobs[i].L, jobs[i].ring_len));
    if (count == 0 || rows == 0) return;
    auto* dev = static_cast<WindowStoreJob*>(scratch.get(9, size_t(count) * sizeof(WindowStoreJob)));
    DI_CUDA_CHECK(cudaMemcpyAsync(dev, jobs, size_t(count) * sizeof(WindowStoreJob), cudaMemcpyHostToDevice,
                                  as_stream(s)));  // pageable: staged before the call returns
    window_stores_kernel<<<dim3(unsigned(rows), unsigned(count)), 256, 0, as_stream(s)>>>(dev);
}

void launch_mhc_post(const void* streams, const float* a, int64_t ld_a, const float* post, int64_t ld_post,
                     const float* comb, int64_t ld_comb, void* out, bool bf16, int64_t n, int64_t hc,
                     int64_t D, Stream s) {
    if (n == 0) return;
    launch_post(streams, a, ld_a, nullptr, 0, nullptr, 0, post, ld_post, comb, ld_comb, out, bf16, n, hc, D,
                as_stream(s));
}

void launch_add_mhc_post(const void* streams, const float* a, int64_t ld_a, const float* b, int64_t ld_b,
                         float* sum, int64_t ld_sum, const float* post, int64_t ld_post, const float* comb,
                         int64_t ld_comb, void* out, bool bf16, int64_t n, int64_t hc, int64_t D, Stream s) {
    if (n == 0) return;
    launch_post(streams, a, ld_a, b, ld_b, sum, ld_sum, post, ld_post, comb, ld_comb, out, bf16, n, hc, D,
                as_stream(s));
}

bool rms_norm_rope_supported(int64_t hd, int64_t half) {
    return hd > 0 && hd % 2 == 0 && hd <= 256 * 16 && 2 * half <= hd;
}

void launch_rms_norm_rope(const float* x, int64_t ldx, const NormOut& norm, const RopeParams& rope,
                          Stream s) {
    const int64_t rows = rope.n * rope.heads;
    if (rows == 0) return;
    const cudaStream_t st = as_stream(s);
    if (norm_rope_warp_ok(x, ldx, norm, rope))
        launch_rms_norm_rope_warp(x, ldx, norm, rope, st);
    else if (rope.hd <= 256 * 4)
        rms_norm_rope_kernel<4><<<unsigned(rows), 256, 0, st>>>(x, ldx, norm, rope);
    else
        rms_norm_rope_kernel<16><<<unsigned(rows), 256, 0, st>>>(x, ldx, norm, rope);
}

void launch_rms_norm_ropes(const NormRopeJob* jobs, int64_t count, Scratch& scratch, Stream s) {
    if (count == 1) return launch_rms_norm_rope(jobs[0].x, jobs[0].ldx, jobs[0].norm, jobs[0].rope, s);
    int64_t rows = 0, hd = 0;
    for (int64_t i = 0; i < count; ++i)
        rows = std::max(rows, jobs[i].rope.n * jobs[i].rope.heads), hd = std::max(hd, jobs[i].rope.hd);
    if (rows == 0) return;
    int64_t warp_ok = 0;
    for (int64_t i = 0; i < count; ++i)
        warp_ok += norm_rope_warp_ok(jobs[i].x, jobs[i].ldx, jobs[i].norm, jobs[i].rope);
    // DEEPINFER_NORM_ROPES_ONE_LAUNCH=0: each alone (A/B timing)
    static const bool one_launch = env_switch("DEEPINFER_NORM_ROPES_ONE_LAUNCH", true);
    // Each job alone where the jobs would take different kernels (a job's bits are its own call's), or where
    // a few would need a table copied from the host (it would end a graph's capture), or by the switch.
    const bool few = count <= kNormRopeJobsByValue;
    if ((warp_ok != 0 && warp_ok != count) || (few && (warp_ok == 0 || !one_launch))) {
        for (int64_t i = 0; i < count; ++i)
            launch_rms_norm_rope(jobs[i].x, jobs[i].ldx, jobs[i].norm, jobs[i].rope, s);
        return;
    }
    const cudaStream_t st = as_stream(s);
    if (few) {  // all on the warp kernel: the jobs as its argument
        NormRopeJobs args;
        std::copy(jobs, jobs + count, args.job);
        args.count = int(count);
        return launch_rms_norm_ropes_warp(args, st);
    }
    auto* dev = static_cast<NormRopeJob*>(scratch.get(12, size_t(count) * sizeof(NormRopeJob)));
    DI_CUDA_CHECK(cudaMemcpyAsync(dev, jobs, size_t(count) * sizeof(NormRopeJob), cudaMemcpyHostToDevice,
                                  st));  // pageable: staged before the call returns
    if (warp_ok == count) return launch_rms_norm_ropes_warp(dev, jobs, count, st);
    const dim3 grid{unsigned(rows), unsigned(count)};
    if (hd <= 256 * 4)
        rms_norm_ropes_kernel<4><<<grid, 256, 0, st>>>(dev);
    else
        rms_norm_ropes_kernel<16><<<grid, 256, 0, st>>>(dev);
}

const char* last_launch_error() {
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace di::cuda
