// mHC pre (and the hc head). The norm and the (2 + hc) * hc mixing dot products are block reductions in
// double with a fixed tree (deterministic, as the reference), one block per (mix row, token); the tiny
// sigmoid / softmax / Sinkhorn step runs on one thread per token in double; then that block collapses.
// Reads fn once per token: (2 + hc) * hc * hc * D * 4 bytes (1.5 MB for V4-Flash), L2-resident across tokens.
#include "ops/cuda/device_util.cuh"

namespace di::cuda {
namespace {

constexpr int kMaxHc = 8;

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

// grid (M, n): block (m, t) computes mix[t, m] = fn[m] . rms(streams[t]); every block recomputes the token's
// norm (hc * D * 4 bytes, L2-resident) so that a single token still spreads over M blocks.
__global__ void __launch_bounds__(256) mhc_mix_kernel(MhcParams p, double* mix_out) {
    __shared__ double red[32];
    const int64_t m = blockIdx.x, t = blockIdx.y, width = p.hc * p.D, M = gridDim.x;
    const float* v = p.streams + t * width;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) ss += double(v[i]) * v[i];
    ss = block_sum_d(ss, red);
    const float inv = float(1.0 / sqrt(ss / double(width) + double(p.norm_eps)));
    const float* f = p.fn + m * p.ld_fn;
    double acc = 0;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) acc += double(v[i] * inv) * f[i];
    acc = block_sum_d(acc, red);
    if (threadIdx.x == 0) mix_out[t * M + m] = acc;
}

// One block per token: pre / post / comb from the mixes, then the collapse.
__global__ void __launch_bounds__(256) mhc_finish_kernel(MhcParams p, const double* mix_in) {
    __shared__ double mix[(2 + kMaxHc) * kMaxHc];
    __shared__ float pre[kMaxHc];
    const int64_t t = blockIdx.x, width = p.hc * p.D;
    const int64_t M = p.head ? p.hc : (2 + p.hc) * p.hc;
    const float* v = p.streams + t * width;
    for (int64_t m = threadIdx.x; m < M; m += blockDim.x) mix[m] = mix_in[t * M + m];
    __syncthreads();
    if (threadIdx.x == 0) {
        const int64_t hc = p.hc;
        for (int64_t i = 0; i < hc; ++i) pre[i] = float(sigmoid_d(mix[i] * p.scale[0] + p.base[i]) + p.hc_eps);
        if (!p.head) {
            for (int64_t i = 0; i < hc; ++i)
                p.post[t * p.ld_post + i] = float(2.0 * sigmoid_d(mix[hc + i] * p.scale[1] + p.base[hc + i]));
            double C[kMaxHc * kMaxHc];
            for (int64_t j = 0; j < hc; ++j) {
                double m = -INFINITY, sum = 0;
                for (int64_t k = 0; k < hc; ++k) {
                    const int64_t idx = 2 * hc + j * hc + k;
                    C[j * hc + k] = mix[idx] * p.scale[2] + p.base[idx];
                    m = fmax(m, C[j * hc + k]);
                }
                for (int64_t k = 0; k < hc; ++k) sum += (C[j * hc + k] = exp(C[j * hc + k] - m));
                for (int64_t k = 0; k < hc; ++k) C[j * hc + k] = C[j * hc + k] / sum + p.hc_eps;
            }
            for (int it = 0; it < 2 * p.sinkhorn_iters - 1; ++it) {
                const bool cols = (it % 2) == 0;  // columns first, then rows / columns alternate
                for (int64_t a = 0; a < hc; ++a) {
                    double s = 0;
                    for (int64_t b = 0; b < hc; ++b) s += cols ? C[b * hc + a] : C[a * hc + b];
                    for (int64_t b = 0; b < hc; ++b) (cols ? C[b * hc + a] : C[a * hc + b]) /= (s + p.hc_eps);
                }
            }
            for (int64_t i = 0; i < hc * hc; ++i) p.comb[t * p.ld_comb + i] = float(C[i]);
        }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < p.D; c += blockDim.x) {
        double acc = 0;
        for (int64_t i = 0; i < p.hc; ++i) acc += double(pre[i]) * v[i * p.D + c];
        p.x[t * p.ld_x + c] = float(acc);
    }
}

}  // namespace

int mhc_max_hc() { return kMaxHc; }

void launch_mhc_pre(const MhcParams& p, Scratch& scratch, Stream s) {
    if (p.n == 0) return;
    const int64_t M = p.head ? p.hc : (2 + p.hc) * p.hc;
    double* mix = static_cast<double*>(scratch.get(3, size_t(p.n * M) * sizeof(double)));
    mhc_mix_kernel<<<dim3(unsigned(M), unsigned(p.n)), 256, 0, as_stream(s)>>>(p, mix);
    mhc_finish_kernel<<<unsigned(p.n), 256, 0, as_stream(s)>>>(p, mix);
}

}  // namespace di::cuda
