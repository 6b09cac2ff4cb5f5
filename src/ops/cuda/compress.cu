// KV compressor: entries of the windows a chunk closes (one thread per (entry, channel)), then the state
// update (one thread per channel, so each thread reads the old buffer column before overwriting it); one
// call, or several sequences' calls with a job table (a grid dimension over the jobs). Slot
// sources follow the reference: position q < pos0 -> buffered token (slot q % rate), else chunk row.
#include <algorithm>
#include <cfloat>

#include "ops/cuda/device_util.cuh"

namespace di::cuda {
namespace {

// Value and logit (bias included) of channel c of the token at position q.
__device__ __forceinline__ void token(const CompressParams& p, int64_t q, int64_t c, float& v, float& g) {
    const int64_t slot = q % p.rate;
    if (q < p.pos0) {
        v = p.buf_kv[slot * p.ld_buf_kv + c];
        g = p.buf_gate[slot * p.ld_buf_gate + c];
    } else {
        v = p.kv[(q - p.pos0) * p.ld_kv + c];
        g = p.gate[(q - p.pos0) * p.ld_gate + c];
    }
    g += p.bias[slot * p.ld_bias + c];
}

// Slot s of window w's softmax. With overlap, slots [0, rate) are the previous window's tokens, channels
// [0, d) (none before window 0; the state's overlap buffer for the chunk's first window), and slots [rate,
// 2 rate) this window's tokens, channels [d, 2d); without overlap, slot s is the window's token s.
__device__ __forceinline__ void window_slot(const CompressParams& p, int64_t w, int64_t first_w, int64_t s,
                                            int64_t c, float& v, float& g) {
    if (!p.overlap) {
        token(p, w * p.rate + s, c, v, g);
    } else if (s >= p.rate) {
        token(p, w * p.rate + s - p.rate, p.d + c, v, g);
    } else if (w == 0) {
        v = 0;
        g = -INFINITY;
    } else if (w == first_w) {
        v = p.ovl_kv[s * p.ld_ovl_kv + c];
        g = p.ovl_gate[s * p.ld_ovl_gate + c];
    } else {
        token(p, (w - 1) * p.rate + s, c, v, g);
    }
}

// Entry e (of the n_new the chunk closes), channel c.
__device__ __forceinline__ void compress_entry(const CompressParams& p, int64_t e, int64_t c) {
    if (c >= p.d || e >= p.n_new) return;
    const int64_t first_w = p.pos0 / p.rate, w = first_w + e;
    // pass 1: max logit; pass 2: softmax-weighted sum (two passes keep the reference's rounding steps)
    float m = -INFINITY;
    for (int pass = 0; pass < 2; ++pass) {
        double denom = 0;
        if (pass == 1) {
            for (int64_t s = 0; s < (p.overlap ? 2 * p.rate : p.rate); ++s) {
                float v, g;
                window_slot(p, w, first_w, s, c, v, g);
                denom += exp(double(g) - double(m));
            }
        }
        double acc = 0;
        for (int64_t s = 0; s < (p.overlap ? 2 * p.rate : p.rate); ++s) {
            float v, g;
            window_slot(p, w, first_w, s, c, v, g);
            if (pass == 0)
                m = fmaxf(m, g);
            else
                acc += double(float(exp(double(g) - double(m)) / denom)) * v;
        }
        if (pass == 1) p.out[e * p.ld_out + c] = float(acc);
    }
}

// Channel c of the state update.
__device__ __forceinline__ void compress_state(const CompressParams& p, int64_t c) {
    if (c >= p.width) return;
    if (p.overlap && p.n_new > 0 && c < p.d) {  // a-half of the last closed window, logits with bias
        const int64_t w = p.pos0 / p.rate + p.n_new - 1;
        for (int64_t s = 0; s < p.rate; ++s) {
            float v, g;
            token(p, w * p.rate + s, c, v, g);
            p.ovl_kv[s * p.ld_ovl_kv + c] = v;
            p.ovl_gate[s * p.ld_ovl_gate + c] = g;
        }
    }
    // tokens of the open window stay buffered (without bias)
    const int64_t open_start = (p.pos0 + p.L) / p.rate * p.rate;
    for (int64_t t = max(int64_t(0), open_start - p.pos0); t < p.L; ++t) {
        const int64_t slot = (p.pos0 + t) % p.rate;
        p.buf_kv[slot * p.ld_buf_kv + c] = p.kv[t * p.ld_kv + c];
        p.buf_gate[slot * p.ld_buf_gate + c] = p.gate[t * p.ld_gate + c];
    }
}

__global__ void compress_entries_kernel(CompressParams p) {
    allow_early_next();
    compress_entry(p, blockIdx.y, blockIdx.x * int64_t(blockDim.x) + threadIdx.x);
}

__global__ void compress_state_kernel(CompressParams p) {
    allow_early_next();
    compress_state(p, blockIdx.x * int64_t(blockDim.x) + threadIdx.x);
}

// Job blockIdx.z of a batch; its blocks past the job's own grid return at once.
__global__ void compresses_entries_kernel(const CompressParams* jobs) {
    allow_early_next();
    const CompressParams p = jobs[blockIdx.z];
    compress_entry(p, blockIdx.y, blockIdx.x * int64_t(blockDim.x) + threadIdx.x);
}

__global__ void compresses_state_kernel(const CompressParams* jobs) {
    allow_early_next();
    const CompressParams p = jobs[blockIdx.y];
    if (p.L > 0) compress_state(p, blockIdx.x * int64_t(blockDim.x) + threadIdx.x);
}

}  // namespace

void launch_compress(const CompressParams& p, Stream s) {
    if (p.n_new > 0)
        compress_entries_kernel<<<dim3(blocks_for(p.d, 128), unsigned(p.n_new)), 128, 0, as_stream(s)>>>(p);
    if (p.L > 0) compress_state_kernel<<<blocks_for(p.width, 128), 128, 0, as_stream(s)>>>(p);
}

void launch_compresses(const CompressParams* jobs, int64_t count, Scratch& scratch, Stream s) {
    if (count == 1) return launch_compress(jobs[0], s);  // no table
    int64_t d = 0, n_new = 0, width = 0;
    for (int64_t i = 0; i < count; ++i) {
        if (jobs[i].n_new > 0) d = std::max(d, jobs[i].d), n_new = std::max(n_new, jobs[i].n_new);
        if (jobs[i].L > 0) width = std::max(width, jobs[i].width);
    }
    if (n_new == 0 && width == 0) return;
    auto* dev = static_cast<CompressParams*>(scratch.get(10, size_t(count) * sizeof(CompressParams)));
    DI_CUDA_CHECK(cudaMemcpyAsync(dev, jobs, size_t(count) * sizeof(CompressParams), cudaMemcpyHostToDevice,
                                  as_stream(s)));  // pageable: staged before the call returns
    if (n_new > 0)
        compresses_entries_kernel<<<dim3(blocks_for(d, 128), unsigned(n_new), unsigned(count)), 128, 0,
                                    as_stream(s)>>>(dev);
    if (width > 0)
        compresses_state_kernel<<<dim3(blocks_for(width, 128), unsigned(count)), 128, 0, as_stream(s)>>>(dev);
}

}  // namespace di::cuda
