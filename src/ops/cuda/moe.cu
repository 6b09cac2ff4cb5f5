// Routing (one block per token: scores in double as the reference, then k rounds of a block arg-max with the
// lower-id tie rule) and the routed experts. The experts run per (token, slot) with the expert id read on
// the device, so no host sync is needed on the decode path:
//   h[t, j] = swiglu(W1_e x_t, W3_e x_t)   one warp per row of W1/W3
//   y[t, j] = W2_e h[t, j]                 one warp per row of W2
//   out[t]  = sum_j w[t, j] y[t, j]        in slot order (deterministic)
// Each (token, slot) reads its expert's weights once: decode is bound by k expert matrices per token.
#include "ops/cuda/device_util.cuh"
#include "ops/cuda/hc_streams.cuh"
#include "ops/cuda/moe_plan.cuh"

namespace di::cuda {
namespace {

__device__ __forceinline__ double score_fn(bool sigmoid, double x) {
    if (sigmoid) return 1.0 / (1.0 + exp(-x));
    return sqrt(x > 20.0 ? x : log1p(exp(x)));  // torch softplus threshold 20
}

// The warp's largest (value, id), ties to the lower id; every lane gets it.
__device__ __forceinline__ void warp_argmax(double& bv, int& bi) {
    for (int o = 16; o > 0; o >>= 1) {
        const double ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) {
            bv = ov;
            bi = oi;
        }
    }
}

constexpr int kRouteMaxPerLane = 16;  // experts per lane of the one-warp top-k (E <= 512)

// Dynamic smem: score [E] f32-rounded doubles, key [E].
__global__ void __launch_bounds__(256) route_kernel(RouteParams p) {
    allow_early_next();
    extern __shared__ double rs[];
    double* score = rs;
    double* key = rs + p.E;
    __shared__ double best_v[32];
    __shared__ int best_i[32];
    __shared__ int chosen[64];
    const int64_t t = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t e = threadIdx.x; e < p.E; e += blockDim.x) {
        score[e] = double(float(score_fn(p.sigmoid, p.logits[t * p.ld_logits + e])));
        key[e] = double(float(score[e] + (p.bias ? p.bias[e] : 0.0f)));
    }
    __syncthreads();
    if (p.tid2eid == nullptr && p.E <= 32 * kRouteMaxPerLane) {
        // top-k on warp 0 alone, no block barriers: lane l holds experts l + 32 i in registers; each round
        // takes the warp's best untaken (higher key, then lower id: the loop below's order)
        if (warp == 0) {
            double v[kRouteMaxPerLane];
            uint32_t taken = 0;
#pragma unroll
            for (int i = 0; i < kRouteMaxPerLane; ++i) {
                const int64_t e = lane + 32 * i;
                v[i] = e < p.E ? key[e] : 0.0;
            }
            for (int64_t j = 0; j < p.k; ++j) {
                double bv = -INFINITY;
                int bi = int(p.E);
#pragma unroll
                for (int i = 0; i < kRouteMaxPerLane; ++i) {
                    const int e = lane + 32 * i;
                    if (e < p.E && !(taken >> i & 1u) && (v[i] > bv || (v[i] == bv && e < bi))) {
                        bv = v[i];
                        bi = e;
                    }
                }
                warp_argmax(bv, bi);
                if (bi < p.E && (bi & 31) == lane) taken |= 1u << (bi >> 5);
                if (lane == 0) chosen[j] = bi;
            }
        }
    } else {
        for (int64_t j = 0; j < p.k; ++j) {
            if (p.tid2eid) {
                if (threadIdx.x == 0) {
                    int32_t tok = p.tokens[t];
                    tok = tok < 0 || tok >= p.vocab ? 0 : tok;
                    const int64_t i = tok * p.ld_tid + j;
                    int64_t e = p.tid_i64 ? static_cast<const int64_t*>(p.tid2eid)[i]
                                          : static_cast<const int32_t*>(p.tid2eid)[i];
                    chosen[j] = int(e < 0 || e >= p.E ? 0 : e);
                }
                continue;
            }
            double bv = -INFINITY;
            int bi = int(p.E);
            for (int64_t e = threadIdx.x; e < p.E; e += blockDim.x) {
                bool taken = false;
                for (int64_t i = 0; i < j; ++i) taken |= chosen[i] == e;
                if (!taken && (key[e] > bv || (key[e] == bv && e < bi))) {
                    bv = key[e];
                    bi = int(e);
                }
            }
            warp_argmax(bv, bi);
            if (lane == 0) {
                best_v[warp] = bv;
                best_i[warp] = bi;
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                for (int i = 1; i < nw; ++i)
                    if (best_v[i] > bv || (best_v[i] == bv && best_i[i] < bi)) {
                        bv = best_v[i];
                        bi = best_i[i];
                    }
                chosen[j] = bi;
            }
            __syncthreads();
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0;
        for (int64_t j = 0; j < p.k; ++j) sum += score[chosen[j]];
        for (int64_t j = 0; j < p.k; ++j) {
            p.ids[t * p.ld_ids + j] = chosen[j];
            p.weights[t * p.ld_weights + j] = float(score[chosen[j]] / (sum + 1e-20) * p.scaling);
        }
    }
}

// Dot of W[o, :] with x (a warp); vectorised when the weight allows it.
__device__ __forceinline__ float warp_dot(const WeightRef& w, int64_t o, const float* x, bool vec, int lane) {
    float acc = 0.0f;
    if (vec) {
        for (int64_t i = int64_t(lane) * 8; i < w.in_dim; i += 256) {
            float v[8];
            weight_at8(w, o, i, v);
#pragma unroll
            for (int j = 0; j < 8; ++j) acc += x[i + j] * v[j];
        }
    } else {
        for (int64_t i = lane; i < w.in_dim; i += 32) acc += x[i] * weight_at(w, o, i);
    }
    return warp_sum(acc);
}

__device__ __forceinline__ bool vec_ok(const WeightRef& w) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(w.data);
    if (w.in_dim % 8 != 0) return false;
    if (w.format == 1) return base % 8 == 0 && w.ld % 8 == 0;
    if (w.format == 2) return base % 4 == 0 && w.ld % 4 == 0;
    const int64_t es = w.dense_dt == Fdt::kF32 ? 4 : 2;
    return base % 16 == 0 && (w.ld * es) % 16 == 0;
}

// grid (ceil(I / 8), n * k): h[pair, r]
__global__ void __launch_bounds__(256) moe_up_kernel(MoeParams p, float* h) {
    allow_early_next();
    const int64_t pair = blockIdx.y, r = int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= p.I) return;
    const int e = moe_expert_of(p, pair);
    float out = 0.0f;
    if (e >= 0) {
        const WeightRef w1 = p.table[3 * e], w3 = p.table[3 * e + 1];
        const float* x = p.x + (pair / p.k) * p.ld_x;
        out = swiglu_clamped(warp_dot(w1, r, x, vec_ok(w1), lane), warp_dot(w3, r, x, vec_ok(w3), lane),
                             p.limit);
    }
    if (lane == 0) h[pair * p.I + r] = out;
}

// grid (ceil(D / 8), n * k): y[pair, c]
__global__ void __launch_bounds__(256) moe_down_kernel(MoeParams p, const float* h, float* y) {
    allow_early_next();
    const int64_t pair = blockIdx.y, c = int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (c >= p.D) return;
    const int e = moe_expert_of(p, pair);
    float out = 0.0f;
    if (e >= 0) {
        const WeightRef w2 = p.table[3 * e + 2];
        out = warp_dot(w2, c, h + pair * p.I, vec_ok(w2), lane);
    }
    if (lane == 0) y[pair * p.D + c] = out;
}

__global__ void moe_combine_kernel(MoeParams p, const float* y) {
    allow_early_next();
    const int64_t t = blockIdx.x;
    for (int64_t c = blockIdx.y * int64_t(blockDim.x) + threadIdx.x; c < p.D;
         c += int64_t(gridDim.y) * blockDim.x)
        p.out[t * p.ld_out + c] = combine_column(p, y, t, c);
}

// The same sums (combine_column's arithmetic, in slot order) four columns a thread for k <= kCombine4MaxK:
// the slots' experts and weights read first, then every slot's row loaded at once (combine_column's loads
// wait on each slot's expert id in turn). In: y's element type, float or __nv_bfloat16 (read in f32).
constexpr int kCombine4MaxK = 8;
template <class In = float>
__global__ void __launch_bounds__(256) moe_combine4_kernel(MoeParams p, const In* y) {
    allow_early_next();
    const int64_t t = blockIdx.x, c = 4 * (int64_t(blockIdx.y) * blockDim.x + threadIdx.x);
    if (c >= p.D) return;
    float4 v[kCombine4MaxK];
    double w[kCombine4MaxK];
#pragma unroll
    for (int j = 0; j < kCombine4MaxK; ++j) {
        const int64_t pair = t * p.k + j;
        const bool has = j < p.k && moe_expert_of(p, pair) >= 0;
        w[j] = j < p.k ? double(p.w[t * p.ld_w + j]) : 0.0;
        v[j] = has ? hc::ld4(y + pair * p.D + c) : make_float4(0, 0, 0, 0);
    }
    double acc[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < kCombine4MaxK; ++j)
        if (j < p.k)
            acc[0] += double(v[j].x) * w[j], acc[1] += double(v[j].y) * w[j], acc[2] += double(v[j].z) * w[j],
                acc[3] += double(v[j].w) * w[j];
    float* out = p.out + t * p.ld_out + c;
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = float(acc[i]);
}

}  // namespace

void launch_route(const RouteParams& p, Stream s) {
    if (p.n == 0) return;
    route_kernel<<<unsigned(p.n), 256, size_t(2 * p.E) * sizeof(double), as_stream(s)>>>(p);
}

void launch_moe(const MoeParams& p, Scratch& scratch, Stream s, MoeVariant v) {
    if (p.n == 0) return;
    if (v == MoeVariant::kAuto)
        v = moe_w4a8_supported(p)      ? MoeVariant::kW4a8
            : moe_wgmma_supported(p)   ? MoeVariant::kWgmma
            : moe_gemm_supported(p)    ? MoeVariant::kGemm
            : moe_mma_supported(p)     ? MoeVariant::kMma
            : moe_split_supported(p)   ? MoeVariant::kSplitRows
            : moe_grouped_supported(p) ? MoeVariant::kGrouped
                                       : MoeVariant::kPerPair;
    if (v == MoeVariant::kW4a8) {
        if (!moe_w4a8_supported(p, true)) {
            std::fprintf(stderr, "deepinfer: moe variant w4a8 forced where it does not apply\n");
            std::abort();
        }
        return launch_moe_w4a8(p, scratch, s);
    }
    if (v == MoeVariant::kWgmma) {
        if (!moe_wgmma_supported(p, true)) {
            std::fprintf(stderr, "deepinfer: moe variant wgmma forced where it does not apply\n");
            std::abort();
        }
        return launch_moe_wgmma(p, scratch, s);
    }
    if (v == MoeVariant::kGemm) {
        if (!moe_gemm_supported(p, true)) {
            std::fprintf(stderr, "deepinfer: moe variant gemm forced where it does not apply\n");
            std::abort();
        }
        return launch_moe_gemm(p, scratch, s);
    }
    if (v == MoeVariant::kMma) {
        if (!moe_mma_supported(p)) {
            std::fprintf(stderr, "deepinfer: moe variant mma forced where it does not apply\n");
            std::abort();
        }
        return launch_moe_mma(p, scratch, s);
    }
    if (v == MoeVariant::kSplitRows) {
        if (!moe_split_supported(p)) {
            std::fprintf(stderr, "deepinfer: moe variant split_rows forced where it does not apply\n");
            std::abort();
        }
        return launch_moe_split(p, scratch, s);
    }
    if (v == MoeVariant::kGrouped) {
        if (!moe_grouped_supported(p)) {
            std::fprintf(stderr, "deepinfer: moe variant grouped forced where it does not apply\n");
            std::abort();
        }
        return launch_moe_grouped(p, scratch, s);
    }
    const int64_t pairs = p.n * p.k;
    float* h = static_cast<float*>(scratch.get(1, size_t(pairs * p.I) * sizeof(float)));
    float* y = p.y_out ? p.y_out : static_cast<float*>(scratch.get(2, size_t(pairs * p.D) * sizeof(float)));
    moe_up_kernel<<<dim3(blocks_for(p.I, 8), unsigned(pairs)), 256, 0, as_stream(s)>>>(p, h);
    moe_quantise_h(p, h, pairs, as_stream(s));
    moe_down_kernel<<<dim3(blocks_for(p.D, 8), unsigned(pairs)), 256, 0, as_stream(s)>>>(p, h, y);
    if (p.y_out == nullptr) launch_moe_combine(p, y, s);
}

bool moe_combine_takes_bf16(const MoeParams& p) { return p.k <= kCombine4MaxK && p.D % 4 == 0; }

void launch_moe_combine_bf16(const MoeParams& p, const void* y, Stream s) {
    moe_combine4_kernel<__nv_bfloat16>
        <<<dim3(unsigned(p.n), blocks_for(p.D / 4, 256)), 256, 0, as_stream(s)>>>(
            p, static_cast<const __nv_bfloat16*>(y));
}

void launch_moe_combine(const MoeParams& p, const float* y, Stream s) {
    const cudaStream_t st = as_stream(s);
    if (p.k <= kCombine4MaxK && p.D % 4 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0)
        moe_combine4_kernel<<<dim3(unsigned(p.n), blocks_for(p.D / 4, 256)), 256, 0, st>>>(p, y);
    else
        moe_combine_kernel<<<dim3(unsigned(p.n), unsigned(std::min<int64_t>(blocks_for(p.D, 256), 64))), 256,
                             0, st>>>(p, y);
}

}  // namespace di::cuda
