// Attention of one sequence's chunk over its window ring, its own kv rows and compressed entries, with sinks.
// Block = (query t, 8 heads); warp = one head; keys are staged in shared memory in tiles of kTile rows and
// shared by the block's heads. Online softmax in f32 that starts from the sink (m = sink, l = 1).
// Per query: reads n_keys * hd * 4 bytes once per 8 heads; decode is bound by that (L2-resident) traffic.
#include "ops/cuda/device_util.cuh"

namespace di::cuda {
namespace {

constexpr int kHeadsPerBlock = 8;
constexpr int kTile = 16;
constexpr int kMaxPerLane = 16;  // head_dim <= 512

__device__ __forceinline__ const float* key_row(const AttentionParams& p, int64_t j, int64_t lo, int64_t n_win,
                                                const int32_t* list) {
    if (j < n_win) {
        const int64_t pp = lo + j;
        return pp < p.pos0 ? p.ring + (pp % (p.window - 1)) * p.ld_ring : p.kv + (pp - p.pos0) * p.ld_kv;
    }
    const int64_t c = j - n_win;
    return p.comp + (p.comp_mask == 1 ? c : int64_t(list[c])) * p.ld_comp;
}

__global__ void __launch_bounds__(256) attention_kernel(AttentionParams p) {
    extern __shared__ float smem[];
    float* tile = smem;                                                // [kTile][hd]
    int32_t* list = reinterpret_cast<int32_t*>(smem + kTile * p.hd);   // [2k] picks, then keep flags
    __shared__ int n_list;
    const int64_t t = blockIdx.x, pos = p.pos0 + t;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t h = int64_t(blockIdx.y) * kHeadsPerBlock + warp;

    const int64_t lo = max(pos - p.window + 1, p.pos0 - p.n_cached);
    const int64_t n_win = pos - lo + 1;
    int64_t n_comp = 0;
    if (p.comp_mask == 1) {
        n_comp = min(p.n_comp, (pos + 1) / p.rate);
    } else if (p.comp_mask == 2) {
        // keep the first occurrence of each valid pick, in pick order: flags in parallel, compaction serial
        const int32_t* pk = p.picks + t * p.ld_picks;
        for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) list[j] = pk[j];
        __syncthreads();
        int32_t* keep = list + p.k;
        for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
            const int32_t w = list[j];
            bool ok = w >= 0 && w < p.n_comp;
            for (int64_t i = 0; i < j && ok; ++i) ok = list[i] != w;
            keep[j] = ok;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int cnt = 0;
            for (int64_t j = 0; j < p.k; ++j)
                if (keep[j]) list[cnt++] = list[j];
            n_list = cnt;
        }
        __syncthreads();
        n_comp = n_list;
    }
    const int64_t n_keys = n_win + n_comp;

    float q[kMaxPerLane], acc[kMaxPerLane];
    const bool active = h < p.H;
    const float* qh = p.q + t * p.q_s0 + (active ? h : 0) * p.q_s1;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
        const int64_t c = lane + 32 * i;
        q[i] = (c < p.hd) ? qh[c] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = active ? p.sinks[h] : 0.0f, l = 1.0f;

    for (int64_t j0 = 0; j0 < n_keys; j0 += kTile) {
        const int nt = int(min(int64_t(kTile), n_keys - j0));
        __syncthreads();
        for (int r = 0; r < nt; ++r) {
            const float* src = key_row(p, j0 + r, lo, n_win, list);
            for (int64_t c = threadIdx.x; c < p.hd; c += blockDim.x) tile[r * p.hd + c] = src[c];
        }
        __syncthreads();
        if (!active) continue;
        for (int r = 0; r < nt; ++r) {
            const float* kr = tile + r * p.hd;
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < kMaxPerLane; ++i) {
                const int64_t c = lane + 32 * i;
                if (c < p.hd) dot += q[i] * kr[c];
            }
            const float z = warp_sum(dot) * p.scale;
            const float m_new = fmaxf(m, z);
            const float corr = expf(m - m_new), pz = expf(z - m_new);
            l = l * corr + pz;
#pragma unroll
            for (int i = 0; i < kMaxPerLane; ++i) {
                const int64_t c = lane + 32 * i;
                if (c < p.hd) acc[i] = acc[i] * corr + pz * kr[c];
            }
            m = m_new;
        }
    }
    if (!active) return;
    float* oh = p.out + t * p.o_s0 + h * p.o_s1;
    const float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
        const int64_t c = lane + 32 * i;
        if (c < p.hd) oh[c] = acc[i] * inv;
    }
}

}  // namespace

void launch_attention(const AttentionParams& p, Stream s) {
    if (p.L == 0) return;
    const size_t smem = size_t(kTile * p.hd) * sizeof(float) + size_t(p.comp_mask == 2 ? 2 * p.k : 0) * sizeof(int32_t);
    static size_t raised = 48 * 1024;
    if (smem > raised) {
        DI_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        raised = smem;
    }
    const dim3 grid(unsigned(p.L), blocks_for(p.H, kHeadsPerBlock));
    attention_kernel<<<grid, 32 * kHeadsPerBlock, smem, as_stream(s)>>>(p);
}

int attention_max_head_dim() { return 32 * kMaxPerLane; }

}  // namespace di::cuda
