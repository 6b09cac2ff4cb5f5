// Routed experts with each weight row split across a block's threads and x in registers (split_rows.cuh):
//   up:   h[pair, r] = swiglu(W1_e[r] . x_t, W3_e[r] . x_t), W1 and W3 rows read together once for the
//         pairs of expert e (two pairs per pass)
//   down: y[pair, c] = W2_e[c] . h[pair], then out[t] = sum_j w[t, j] y[t, j] in slot order
// One token (decode at batch 1): block y of the up and down launches is slot j, no plan. More tokens: the
// plan groups the pairs by expert (moe_plan.cuh). Both end with the combine of moe.cu and give the same
// bits for a token (the per-row sums and the slot order do not depend on the other tokens): batch-invariant.
//   bytes: the selected experts' weights once (+ x, h) -> bound by 3 * I * D / 2 bytes per active expert
#include <algorithm>

#include "ops/cuda/moe_plan.cuh"
#include "ops/cuda/split_rows.cuh"

namespace di::cuda {
namespace {

using namespace split;

constexpr int kMaxRowsPerBlock = 256;  // partials: rows * 2 tokens * 8 warps floats, 16 KB

// Rows [row0, row0 + rpc) of W1 and W3 for NT pairs (ids clamped to the last real one), then h.
template <int F, int NT>
__device__ __forceinline__ void up_pass(const MoeParams& p, const WeightRef (&w)[2],
                                        const int32_t (&pair)[NT], int nt, int64_t row0, int rpc,
                                        const Group& gr, float* red, float* h) {
    const float* xp[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) xp[t] = p.x + (pair[t] / p.k) * p.ld_x;
    float xr[NT][kChunk];
    load_x<NT>(xp, gr.c, xr);
    const int rpg = rpc / gr.groups;
    const int64_t rbeg = row0 + int64_t(gr.g) * rpg, rend = min(rbeg + rpg, p.I);
    rows_pass<F, NT, 2, kBatch<F, 2, NT>>(w, rbeg, rend, row0, rpc, xr, gr, red);
    __syncthreads();
    const int64_t rows = min(int64_t(rpc), p.I - row0);
    for (int64_t i = threadIdx.x; i < rows * nt; i += blockDim.x) {
        const int64_t lr = i / nt;
        const int t = int(i % nt);
        const float g = group_total<NT>(red, 0, lr, t, rpc, gr.warps),
                    u = group_total<NT>(red, 1, lr, t, rpc, gr.warps);
        h[int64_t(pair[t]) * p.I + row0 + lr] = swiglu_clamped(g, u, p.limit);
    }
    __syncthreads();  // red is reused by the next pass
}

// grid (row blocks of I, slots): kDirect (one token): slot a is pair a; else active expert slot a of the
// plan.
template <int F, bool kDirect>
__global__ void __launch_bounds__(256, 2) moe_up_split(MoeParams p, MoePlan plan, float* h, int rpc) {
    allow_early_next();
    extern __shared__ float red[];
    const int a = blockIdx.y;
    int e, b0, cnt;
    if constexpr (kDirect) {
        e = moe_expert_of(p, a), b0 = a, cnt = 1;
        if (e < 0) return;  // the down launch skips this slot
    } else {
        if (a >= *plan.n_active) return;
        e = plan.expert[a], b0 = plan.begin[a], cnt = plan.begin[a + 1] - b0;
    }
    const int64_t row0 = int64_t(blockIdx.x) * rpc;
    if (row0 >= p.I) return;
    const WeightRef w[2] = {p.table[3 * e], p.table[3 * e + 1]};
    const Group gr(p.D);
    auto pair_at = [&](int i) { return kDirect ? int32_t(a) : plan.pairs[b0 + i]; };
    for (int i0 = 0; i0 < cnt;) {
        if (!kDirect && cnt - i0 >= 2) {  // one token: never (and the two-pair pass's registers stay out)
            const int32_t pr[2] = {pair_at(i0), pair_at(i0 + 1)};
            up_pass<F, 2>(p, w, pr, 2, row0, rpc, gr, red, h);
            i0 += 2;
        } else {
            const int32_t pr[1] = {pair_at(i0)};
            up_pass<F, 1>(p, w, pr, 1, row0, rpc, gr, red, h);
            i0 += 1;
        }
    }
}

// Rows [row0, row0 + rpc) of W2 for NT pairs, then y.
template <int F, int NT>
__device__ __forceinline__ void down_pass(const MoeParams& p, const WeightRef (&w)[1],
                                          const int32_t (&pair)[NT], int nt, int64_t row0, int rpc,
                                          const Group& gr, float* red, const float* h, float* y) {
    const float* xp[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) xp[t] = h + int64_t(pair[t]) * p.I;
    float xr[NT][kChunk];
    load_x<NT>(xp, gr.c, xr);
    const int rpg = rpc / gr.groups;
    const int64_t rbeg = row0 + int64_t(gr.g) * rpg, rend = min(rbeg + rpg, p.D);
    rows_pass<F, NT, 1, kBatch<F, 1, NT>>(w, rbeg, rend, row0, rpc, xr, gr, red);
    __syncthreads();
    const int64_t rows = min(int64_t(rpc), p.D - row0);
    for (int64_t i = threadIdx.x; i < rows * nt; i += blockDim.x) {
        const int64_t lr = i / nt;
        const int t = int(i % nt);
        y[int64_t(pair[t]) * p.D + row0 + lr] = group_total<NT>(red, 0, lr, t, rpc, gr.warps);
    }
    __syncthreads();
}

// grid (row blocks of D, slots): as moe_up_split.
template <int F, bool kDirect>
__global__ void __launch_bounds__(256, 2)
    moe_down_split(MoeParams p, MoePlan plan, const float* h, float* y, int rpc) {
    allow_early_next();
    extern __shared__ float red[];
    const int a = blockIdx.y;
    int e, b0, cnt;
    if constexpr (kDirect) {
        e = moe_expert_of(p, a), b0 = a, cnt = 1;
        if (e < 0) return;  // the combine does not read this slot
    } else {
        if (a >= *plan.n_active) return;
        e = plan.expert[a], b0 = plan.begin[a], cnt = plan.begin[a + 1] - b0;
    }
    const int64_t row0 = int64_t(blockIdx.x) * rpc;
    if (row0 >= p.D) return;
    const WeightRef w[1] = {p.table[3 * e + 2]};
    const Group gr(p.I);
    auto pair_at = [&](int i) { return kDirect ? int32_t(a) : plan.pairs[b0 + i]; };
    for (int i0 = 0; i0 < cnt;) {
        if (!kDirect && cnt - i0 >= 2) {
            const int32_t pr[2] = {pair_at(i0), pair_at(i0 + 1)};
            down_pass<F, 2>(p, w, pr, 2, row0, rpc, gr, red, h, y);
            i0 += 2;
        } else {
            const int32_t pr[1] = {pair_at(i0)};
            down_pass<F, 1>(p, w, pr, 1, row0, rpc, gr, red, h, y);
            i0 += 1;
        }
    }
}

int capped(int rpc, int gran) { return std::max(gran, std::min(rpc, kMaxRowsPerBlock / gran * gran)); }

template <int F>
void launch_f(const MoeParams& p, Scratch& scratch, cudaStream_t s) {
    const int64_t pairs = p.n * p.k;
    const bool direct = p.n == 1;  // one token: slot j is pair j, no plan
    const unsigned slots = direct ? unsigned(p.k) : unsigned(std::min(pairs, p.n_experts));
    float* h = static_cast<float*>(scratch.get(1, size_t(pairs * p.I) * sizeof(float)));
    float* y = p.y_out ? p.y_out : static_cast<float*>(scratch.get(2, size_t(pairs * p.D) * sizeof(float)));
    MoePlan plan{};
    if (!direct) {
        plan = moe_plan_buffers(scratch, pairs, slots);
        launch_moe_plan(p, plan, s);
    }
    constexpr int up_b = kBatch<F, 2, 1>, dn_b = kBatch<F, 1, 1>;
    const int up_gran = int(256 / (p.D / kChunk)) * up_b, dn_gran = int(256 / (p.I / kChunk)) * dn_b;
    const int up_warps = int(p.D / kChunk / 32), dn_warps = int(p.I / kChunk / 32);
    const int nt = direct ? 1 : 2;  // the partials' token stride
    const int up = capped(rows_per_block(int64_t(slots) * p.I, p.D, up_b, p.I), up_gran);
    const int dn = capped(rows_per_block(int64_t(slots) * p.D, p.I, dn_b, p.D), dn_gran);
    const dim3 up_grid(blocks_for(p.I, up), slots), dn_grid(blocks_for(p.D, dn), slots);
    const size_t up_smem = size_t(2 * up * nt * up_warps) * 4, dn_smem = size_t(dn * nt * dn_warps) * 4;
    if (direct) {
        moe_up_split<F, true><<<up_grid, 256, up_smem, s>>>(p, plan, h, up);
        moe_quantise_h(p, h, pairs, s);
        moe_down_split<F, true><<<dn_grid, 256, dn_smem, s>>>(p, plan, h, y, dn);
    } else {
        moe_up_split<F, false><<<up_grid, 256, up_smem, s>>>(p, plan, h, up);
        moe_quantise_h(p, h, pairs, s);
        moe_down_split<F, false><<<dn_grid, 256, dn_smem, s>>>(p, plan, h, y, dn);
    }
    if (p.y_out == nullptr) launch_moe_combine(p, y, s);
}

}  // namespace

bool moe_split_supported(const MoeParams& p) {
    return p.gemv_format >= 0 && in_dim_ok(p.D) && in_dim_ok(p.I) && p.n * p.k <= kMoeGroupedMaxPairs &&
           reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.ld_x % 4 == 0;
}

void launch_moe_split(const MoeParams& p, Scratch& scratch, Stream s) {
    const cudaStream_t st = as_stream(s);
    switch (p.gemv_format) {
        case kF32:
            launch_f<kF32>(p, scratch, st);
            break;
        case kBF16:
            launch_f<kBF16>(p, scratch, st);
            break;
        case kF16:
            launch_f<kF16>(p, scratch, st);
            break;
        case kFp8:
            launch_f<kFp8>(p, scratch, st);
            break;
        default:
            launch_f<kFp4>(p, scratch, st);
            break;
    }
}

}  // namespace di::cuda
