// Attention of one sequence's chunk over its window ring, its own kv rows and compressed entries, with sinks.
// Block = (query t, 8 heads); warp = one head; keys are staged in shared memory in tiles of kTile rows and
// shared by the block's heads. Two variants:
//   per_query (the fallback): one block walks all keys of its query, online softmax in f32 that starts
//             from the sink (m = sink, l = 1). A decode step (one query, 64 heads) is 8 blocks.
//   split_kv:  the query's key slots (window, then causal entries or pick slots) split into S ranges, one
//             block each, each writing its unnormalised (m, l, acc); a merge kernel folds the sink and the
//             S partials in split order (deterministic; S depends only on the shapes). Picks are
//             deduplicated per slot (kept iff valid and not equal to an earlier slot's pick), as per_query.
// Per query: reads n_keys * hd * 4 bytes once per 8 heads (L2-resident at decode sizes).
#include <algorithm>
#include <vector>

#include "ops/cuda/attention_keys.cuh"
#include "ops/cuda/smem_limit.h"

namespace di::cuda {
namespace {

constexpr int kHeadsPerBlock = 8;
constexpr int kTile = 16;
constexpr int kMaxPerLane = 16;  // head_dim <= 512

__global__ void __launch_bounds__(256) attention_kernel(AttentionParams p) {
    allow_early_next();
    extern __shared__ __align__(16) float smem[];
    float* tile = smem;                                               // [kTile][hd]
    int32_t* list = reinterpret_cast<int32_t*>(smem + kTile * p.hd);  // [2k] picks, then keep flags
    const int64_t t = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t h = int64_t(blockIdx.y) * kHeadsPerBlock + warp;
    const QueryKeys keys = query_keys(p, t, list);
    const int64_t lo = keys.lo, n_win = keys.n_win, n_comp = keys.n_comp;
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

// Key slots of query t: the window (n_win), then causal entries or the k pick slots.
struct Slots {
    int64_t lo, n_win, n_comp_slots;
};
__device__ __forceinline__ Slots slots_of(const AttentionParams& p, int64_t t) {
    const int64_t pos = p.pos0 + t;
    const int64_t lo = max(pos - p.window + 1, p.pos0 - p.n_cached);
    const int64_t n_comp = p.comp_mask == AttnCompMask::kCausal  ? min(p.n_comp, (pos + 1) / p.rate)
                           : p.comp_mask == AttnCompMask::kPicks ? p.k
                                                                 : 0;
    return {lo, pos - lo + 1, n_comp};
}

// grid (L, ceil(H / 8), S): block (t, g, s) takes slots [s * chunk, (s + 1) * chunk) of query t and writes
// part_ml[((t * H + h) * S + s) * 2 + {0, 1}] = (m, l) and part_acc[((t * H + h) * S + s) * hd + c].
// kFull: head_dim == 512, lane l owning columns 128 g + 4 l .. + 3 (g < 4): float4 shared-memory reads and no
// per-element guards (the generic path, one column per lane per 32, costs ~3x the instructions per key).
template <bool kFull>
__device__ __forceinline__ void split_body(const AttentionParams& p, int64_t t, int64_t sp, int64_t S,
                                           float* part_ml, float* part_acc) {
    extern __shared__ __align__(16) float smem[];
    float* tile = smem;                                               // [kTile][hd]
    int32_t* list = reinterpret_cast<int32_t*>(smem + kTile * p.hd);  // [k] picks row, then [chunk] kept ids
    __shared__ int n_list;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t h = int64_t(blockIdx.y) * kHeadsPerBlock + warp;
    const Slots sl = slots_of(p, t);
    const int64_t n_slots = sl.n_win + sl.n_comp_slots, chunk = (n_slots + S - 1) / S;
    const int64_t j0 = min(n_slots, sp * chunk), j1 = min(n_slots, j0 + chunk);
    const int64_t w0 = min(j0, sl.n_win), w1 = min(j1, sl.n_win);  // window keys [w0, w1)
    const int64_t c0 = max(j0, sl.n_win) - sl.n_win, c1 = max(j1, sl.n_win) - sl.n_win;  // comp slots
    int64_t n_comp = c1 - c0;
    int32_t* kept = list + (p.comp_mask == AttnCompMask::kPicks ? p.k : 0);
    if (p.comp_mask == AttnCompMask::kPicks && n_comp > 0) {
        const int32_t* pk = p.picks + t * p.ld_picks;
        for (int64_t j = threadIdx.x; j < c1; j += blockDim.x) list[j] = pk[j];
        __syncthreads();
        for (int64_t j = c0 + threadIdx.x; j < c1; j += blockDim.x) {  // keep flags of this block's slots
            const int32_t w = list[j];
            bool ok = w >= 0 && w < p.n_comp;
            for (int64_t i = 0; i < j && ok; ++i) ok = list[i] != w;
            kept[j - c0] = ok ? w : -1;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int cnt = 0;
            for (int64_t j = 0; j < n_comp; ++j)
                if (kept[j] >= 0) kept[cnt++] = kept[j];
            n_list = cnt;
        }
        __syncthreads();
        n_comp = n_list;
    }
    const int64_t n_keys = (w1 - w0) + n_comp;

    // element i of a lane: column col(i)
    auto col = [&](int i) -> int { return kFull ? 128 * (i / 4) + 4 * lane + i % 4 : lane + 32 * i; };
    float q[kMaxPerLane], acc[kMaxPerLane];
    const bool active = h < p.H;
    const float* qh = p.q + t * p.q_s0 + (active ? h : 0) * p.q_s1;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
        q[i] = (kFull || col(i) < p.hd) ? qh[col(i)] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int64_t nw_local = w1 - w0;
    for (int64_t k0 = 0; k0 < n_keys; k0 += kTile) {
        const int nt = int(min(int64_t(kTile), n_keys - k0));
        __syncthreads();
        // the tile in float4s, every load issued before the first store (one memory latency per tile)
        constexpr int kPer = kTile * kMaxPerLane * 32 / 4 / 256;  // float4s per thread at hd = 512
        const int hd4 = int(p.hd / 4);  // attention_split_supported: hd % 4 == 0, 16-byte rows
        float4 v[kPer];
        float4* tile4 = reinterpret_cast<float4*>(tile);
#pragma unroll
        for (int u = 0; u < kPer; ++u) {
            const int e = int(threadIdx.x) + u * 256, r = e / hd4, c = e - r * hd4;
            v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (r >= nt) continue;
            const int64_t k = k0 + r;
            const float* src;
            if (k < nw_local) {
                const int64_t pp = sl.lo + w0 + k;
                src =
                    pp < p.pos0 ? p.ring + (pp % (p.window - 1)) * p.ld_ring : p.kv + (pp - p.pos0) * p.ld_kv;
            } else {
                const int64_t cc = k - nw_local;
                src =
                    p.comp + (p.comp_mask == AttnCompMask::kCausal ? c0 + cc : int64_t(kept[cc])) * p.ld_comp;
            }
            v[u] = __ldg(reinterpret_cast<const float4*>(src) + c);
        }
#pragma unroll
        for (int u = 0; u < kPer; ++u) {
            const int e = int(threadIdx.x) + u * 256;
            if (e < nt * hd4) tile4[e] = v[u];
        }
        __syncthreads();
        if (!active) continue;
        // all nt dot products first (independent chains), then one softmax rescale per tile
        float z[kTile];
#pragma unroll
        for (int r = 0; r < kTile; ++r) {
            float dot = 0.0f;
            if (r < nt) {
                const float* kr = tile + r * p.hd;
                if constexpr (kFull) {
#pragma unroll
                    for (int g = 0; g < 4; ++g) {
                        const float4 k4 = *reinterpret_cast<const float4*>(kr + 128 * g + 4 * lane);
                        dot = fmaf(q[4 * g], k4.x, dot);
                        dot = fmaf(q[4 * g + 1], k4.y, dot);
                        dot = fmaf(q[4 * g + 2], k4.z, dot);
                        dot = fmaf(q[4 * g + 3], k4.w, dot);
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < kMaxPerLane; ++i)
                        if (col(i) < p.hd) dot = fmaf(q[i], kr[col(i)], dot);
                }
            }
            z[r] = dot;
        }
#pragma unroll
        for (int r = 0; r < kTile; ++r) z[r] = warp_sum(z[r]) * p.scale;
        float mt = m;
#pragma unroll
        for (int r = 0; r < kTile; ++r)
            if (r < nt) mt = fmaxf(mt, z[r]);
        const float corr = expf(m - mt);  // m = -inf before the first tile: corr = 0
        l *= corr;
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i) acc[i] *= corr;
#pragma unroll
        for (int r = 0; r < kTile; ++r) {
            if (r >= nt) break;
            const float pz = expf(z[r] - mt);
            l += pz;
            const float* kr = tile + r * p.hd;
            if constexpr (kFull) {
#pragma unroll
                for (int g = 0; g < 4; ++g) {
                    const float4 k4 = *reinterpret_cast<const float4*>(kr + 128 * g + 4 * lane);
                    acc[4 * g] = fmaf(pz, k4.x, acc[4 * g]);
                    acc[4 * g + 1] = fmaf(pz, k4.y, acc[4 * g + 1]);
                    acc[4 * g + 2] = fmaf(pz, k4.z, acc[4 * g + 2]);
                    acc[4 * g + 3] = fmaf(pz, k4.w, acc[4 * g + 3]);
                }
            } else {
#pragma unroll
                for (int i = 0; i < kMaxPerLane; ++i)
                    if (col(i) < p.hd) acc[i] = fmaf(pz, kr[col(i)], acc[i]);
            }
        }
        m = mt;
    }
    if (!active) return;
    const int64_t slot = (t * p.H + h) * S + sp;
    if (lane == 0) part_ml[2 * slot] = m, part_ml[2 * slot + 1] = l;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i)
        if (kFull || col(i) < p.hd) part_acc[slot * p.hd + col(i)] = acc[i];
}

template <bool kFull>
__global__ void __launch_bounds__(256)
    attention_split_kernel(AttentionParams p, float* part_ml, float* part_acc) {
    allow_early_next();
    split_body<kFull>(p, blockIdx.x, blockIdx.z, gridDim.z, part_ml, part_acc);
}

// grid (1, ceil(H / 8), count * s_max): block z is split z % s_max of job z / s_max (one query each).
template <bool kFull>
__global__ void __launch_bounds__(256) attention_split_batch_kernel(const AttentionJob* jobs, int64_t s_max) {
    allow_early_next();
    const AttentionJob& j = jobs[blockIdx.z / s_max];
    const int64_t sp = blockIdx.z % s_max;
    if (sp >= j.S) return;  // whole block
    split_body<kFull>(j.p, 0, sp, j.S, j.ml, j.acc);
}

// grid (L, H), block 128: out = (sum_s e^{m_s - M} acc_s) / (e^{sink - M} + sum_s e^{m_s - M} l_s), the
// weights computed once by warp 0 (S <= 64: two per lane, fixed butterfly order).
__device__ __forceinline__ void merge_body(const AttentionParams& p, int64_t t, int64_t h, int64_t S,
                                           const float* part_ml, const float* part_acc) {
    __shared__ float wsm[64];
    __shared__ float inv_l;
    const int64_t base = (t * p.H + h) * S;
    const int lane = threadIdx.x & 31;
    if (threadIdx.x < 32) {
        const float sink = p.sinks[h];
        const float m0 = lane < S ? part_ml[2 * (base + lane)] : -INFINITY;
        const float m1 = lane + 32 < S ? part_ml[2 * (base + lane + 32)] : -INFINITY;
        float M = fmaxf(sink, fmaxf(m0, m1));
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        const float e0 = lane < S ? expf(m0 - M) : 0.0f, e1 = lane + 32 < S ? expf(m1 - M) : 0.0f;
        wsm[lane] = e0, wsm[lane + 32] = e1;
        float l = (lane < S ? e0 * part_ml[2 * (base + lane) + 1] : 0.0f) +
                  (lane + 32 < S ? e1 * part_ml[2 * (base + lane + 32) + 1] : 0.0f);
        l = warp_sum(l);
        if (lane == 0) inv_l = 1.0f / (l + expf(sink - M));
    }
    __syncthreads();
    float* oh = p.out + t * p.o_s0 + h * p.o_s1;
    if (p.store_ring != nullptr && h == 0) {  // the fused tail's window store: the split blocks read the ring
        float* dst = p.store_ring + ((p.pos0 + t) % p.store_len) * p.store_ld;
        for (int64_t c = threadIdx.x; c < p.hd; c += blockDim.x) dst[c] = p.kv[t * p.ld_kv + c];
    }
    if (p.rope_pos == nullptr) {
        for (int64_t c = threadIdx.x; c < p.hd; c += blockDim.x) {
            float acc = 0.0f;
#pragma unroll 8
            for (int64_t s = 0; s < S; ++s) acc = fmaf(wsm[s], part_acc[(base + s) * p.hd + c], acc);
            oh[c] = acc * inv_l;
        }
        return;
    }
    // With the rotation: every lane through every pass (its pair partner, column c ^ 1, is the next lane:
    // hd even, blockDim.x a multiple of 32), the pair rotated as rope_kernel does.
    const int64_t off = p.hd - 2 * p.rope_half;
    const float pos = float(p.rope_pos[t]);
    for (int64_t c0 = 0; c0 < p.hd; c0 += blockDim.x) {
        const int64_t c = c0 + threadIdx.x;
        float v = 0.0f;
        if (c < p.hd) {
            float acc = 0.0f;
#pragma unroll 8
            for (int64_t s = 0; s < S; ++s) acc = fmaf(wsm[s], part_acc[(base + s) * p.hd + c], acc);
            v = acc * inv_l;
        }
        const float other = __shfl_xor_sync(0xffffffffu, v, 1);
        if (c >= p.hd) continue;
        if (c >= off) {
            const RopeCs cs = rope_cs(pos * p.rope_inv_freq[(c - off) >> 1], p.rope_mscale, p.rope_inverse);
            v = (c & 1) == 0 ? rope_first(v, other, cs) : rope_second(other, v, cs);
        }
        oh[c] = v;
    }
}

__global__ void __launch_bounds__(128)
    attention_merge_kernel(AttentionParams p, int64_t S, const float* part_ml, const float* part_acc) {
    allow_early_next();
    merge_body(p, blockIdx.x, blockIdx.y, S, part_ml, part_acc);
}

// grid (1, H, count): job z's query.
__global__ void __launch_bounds__(128) attention_merge_batch_kernel(const AttentionJob* jobs) {
    allow_early_next();
    const AttentionJob& j = jobs[blockIdx.z];
    if (blockIdx.y >= j.p.H) return;
    merge_body(j.p, 0, blockIdx.y, j.S, j.ml, j.acc);
}

}  // namespace

bool attention_split_supported(const AttentionParams& p) {
    auto aligned = [](const void* ptr, int64_t ld) {
        return ptr == nullptr || (reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && ld % 4 == 0);
    };
    return p.hd % 4 == 0 && p.hd <= 32 * kMaxPerLane && aligned(p.ring, p.ld_ring) &&
           aligned(p.kv, p.ld_kv) && aligned(p.comp, p.ld_comp);
}

int64_t attention_splits(const AttentionParams& p) {
    const int64_t blocks = p.L * ((p.H + kHeadsPerBlock - 1) / kHeadsPerBlock);
    const int64_t max_slots =
        std::min(p.window, p.pos0 + p.L) + (p.comp_mask == AttnCompMask::kCausal  ? p.n_comp
                                            : p.comp_mask == AttnCompMask::kPicks ? p.k
                                                                                  : 0);
    // about four blocks per multiprocessor, each with at least 32 key slots
    const int64_t want = (4 * int64_t(sm_count()) + blocks - 1) / blocks;
    return std::clamp<int64_t>(std::min(want, (max_slots + 31) / 32), 1, 64);
}

void launch_attention(const AttentionParams& p, Scratch& scratch, Stream s, AttentionVariant v) {
    if (p.L == 0) return;
    if (v == AttentionVariant::kMma64) return launch_attention_mma64(p, scratch, s);
    if (v == AttentionVariant::kMma) return launch_attention_mma(p, s);
    const size_t tile = size_t(kTile * p.hd) * sizeof(float);
    if (v == AttentionVariant::kPerQuery) {
        const size_t smem =
            tile + size_t(p.comp_mask == AttnCompMask::kPicks ? 2 * p.k : 0) * sizeof(int32_t);
        raise_dynamic_smem(attention_kernel, smem);
        const dim3 grid(unsigned(p.L), blocks_for(p.H, kHeadsPerBlock));
        attention_kernel<<<grid, 32 * kHeadsPerBlock, smem, as_stream(s)>>>(p);
        return;
    }
    const int64_t S = attention_splits(p);
    const size_t smem = tile + size_t(p.comp_mask == AttnCompMask::kPicks ? 2 * p.k : 0) * sizeof(int32_t);
    const bool full = p.hd == 32 * kMaxPerLane;
    auto kernel = full ? attention_split_kernel<true> : attention_split_kernel<false>;
    raise_dynamic_smem(kernel, smem);
    float* ml = static_cast<float*>(scratch.get(4, size_t(p.L * p.H * S * 2) * sizeof(float)));
    float* acc = static_cast<float*>(scratch.get(5, size_t(p.L * p.H * S * p.hd) * sizeof(float)));
    const dim3 grid(unsigned(p.L), blocks_for(p.H, kHeadsPerBlock), unsigned(S));
    kernel<<<grid, 32 * kHeadsPerBlock, smem, as_stream(s)>>>(p, ml, acc);
    attention_merge_kernel<<<dim3(unsigned(p.L), unsigned(p.H)), 128, 0, as_stream(s)>>>(p, S, ml, acc);
}

bool attention_batch_takes(const AttentionParams& p) { return p.L == 1 && attention_split_supported(p); }

void launch_attention_batch(const AttentionParams* ps, int64_t count, Scratch& scratch, Stream s) {
    if (count == 0) return;
    if (count == 1) return launch_attention(ps[0], scratch, s, AttentionVariant::kSplitKv);  // no table
    std::vector<AttentionJob> jobs(static_cast<size_t>(count));
    int64_t s_max = 1, ml_n = 0, acc_n = 0, H = 0;
    size_t smem = 0;
    for (int64_t i = 0; i < count; ++i) {
        const AttentionParams& p = ps[i];
        jobs[size_t(i)].p = p;
        jobs[size_t(i)].S = attention_splits(p);  // as the job's own launch: the same bits
        s_max = std::max(s_max, jobs[size_t(i)].S);
        ml_n += p.H * jobs[size_t(i)].S * 2, acc_n += p.H * jobs[size_t(i)].S * p.hd, H = std::max(H, p.H);
        smem =
            std::max(smem, size_t(kTile * p.hd) * sizeof(float) +
                               size_t(p.comp_mask == AttnCompMask::kPicks ? 2 * p.k : 0) * sizeof(int32_t));
    }
    // scratch 4: the job table (16-byte aligned), then the (m, l) partials; scratch 5: the acc partials
    const size_t table = (size_t(count) * sizeof(AttentionJob) + 15) / 16 * 16;
    auto* base4 = static_cast<uint8_t*>(scratch.get(4, table + size_t(ml_n) * sizeof(float)));
    auto* acc = static_cast<float*>(scratch.get(5, size_t(acc_n) * sizeof(float)));
    float* ml = reinterpret_cast<float*>(base4 + table);
    for (AttentionJob& j : jobs) {
        j.ml = ml, j.acc = acc;
        ml += j.p.H * j.S * 2, acc += j.p.H * j.S * j.p.hd;
    }
    auto* dev = reinterpret_cast<AttentionJob*>(base4);
    DI_CUDA_CHECK(cudaMemcpyAsync(dev, jobs.data(), jobs.size() * sizeof(AttentionJob),
                                  cudaMemcpyHostToDevice,
                                  as_stream(s)));    // pageable: staged before the call returns
    const bool full = ps[0].hd == 32 * kMaxPerLane;  // attention_batch: one head_dim for the whole batch
    auto kernel = full ? attention_split_batch_kernel<true> : attention_split_batch_kernel<false>;
    raise_dynamic_smem(kernel, smem);
    const dim3 grid(1, blocks_for(H, kHeadsPerBlock), unsigned(count * s_max));
    kernel<<<grid, 32 * kHeadsPerBlock, smem, as_stream(s)>>>(dev, s_max);
    attention_merge_batch_kernel<<<dim3(1, unsigned(H), unsigned(count)), 128, 0, as_stream(s)>>>(dev);
}

int attention_max_head_dim() { return 32 * kMaxPerLane; }

}  // namespace di::cuda
