// Decode linear at one or two token rows with each weight row split over a block's threads and the
// tokens' x slices in registers (split_rows.cuh): no shared-memory reads of x in the inner loop, the
// weight loads of a block's first rows issued together with those of x. One launch may carry several
// independent linears of one format and in_dim (the grouped output projection, W1 and W3 of the shared
// expert): one ramp and one tail instead of one per matrix. A job of the native precision quantises its x
// slices in registers (SplitJob::quant) instead of reading a quantised copy that a launch before wrote.
//   bytes: out * in * bytes/weight + x + y  -> bound by the weight read
#include "ops/cuda/early_launch.cuh"
#include "ops/cuda/split_rows.cuh"

namespace di::cuda {
namespace {

using namespace split;

constexpr int kMaxRowsPerBlock = 1024;  // partials: rows * NT * warps floats, within 48 KB

// grid (row blocks, jobs): rows [row0, row0 + rpc) of job blockIdx.y's matrix against its NT tokens.
// Started early (early_launch.cuh): a block's first weight rows are in flight before it waits for x.
template <int F, int NT>
__global__ void __launch_bounds__(256, 2) gemv_split_kernel(const __grid_constant__ SplitJobs jobs, int rpc) {
    extern __shared__ float red[];
    allow_early_next();
    const SplitJob& p = jobs.job[blockIdx.y];
    const int64_t row0 = int64_t(blockIdx.x) * rpc;
    if (row0 >= p.w.out_dim) return wait_prior();  // a shorter job of the launch
    const Group gr(p.w.in_dim);
    const float* xp[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) xp[t] = p.x + t * p.ldx;
    float xr[NT][kChunk];
    const WeightRef w[1] = {p.w};
    const int rpg = rpc / gr.groups;
    const int64_t rbeg = row0 + int64_t(gr.g) * rpg, rend = min(rbeg + rpg, p.w.out_dim);
    rows_pass<F, NT, 1, kBatch<F, 1, NT>>(w, rbeg, rend, row0, rpc, xr, gr, red, [&] {
        wait_prior();
        load_x<NT>(xp, gr.c, xr);
        if (p.quant) quant_dequant_x<NT>(xr);  // uniform over the block (its job)
    });
    __syncthreads();
    const int64_t rows = min(int64_t(rpc), p.w.out_dim - row0);
    for (int64_t i = threadIdx.x; i < rows * NT; i += blockDim.x) {
        const int64_t lr = i / NT;
        const int t = int(i % NT);
        p.y[t * p.ldy + row0 + lr] = group_total<NT>(red, 0, lr, t, rpc, gr.warps);
    }
}

template <int F, int NT>
void launch_k(const SplitJobs& jobs, cudaStream_t s) {
    constexpr int b = kBatch<F, 1, NT>;
    const int64_t in = jobs.job[0].w.in_dim;
    int64_t rows = 0, longest = 0;
    for (int j = 0; j < jobs.count; ++j)
        rows += jobs.job[j].w.out_dim, longest = std::max(longest, jobs.job[j].w.out_dim);
    const int gran = int(256 / (in / kChunk)) * b, warps = int(in / kChunk / 32);
    int rpc = rows_per_block(rows, in, b, longest);
    rpc = std::max(gran, std::min(rpc, kMaxRowsPerBlock / (NT * warps) / gran * gran));
    launch_early(gemv_split_kernel<F, NT>, dim3(blocks_for(longest, rpc), unsigned(jobs.count)), dim3(256),
                 size_t(rpc * NT * warps) * 4, s, jobs, rpc);
}

template <int F>
void launch_f(const SplitJobs& jobs, int64_t n, cudaStream_t s) {
    if (n == 1)
        launch_k<F, 1>(jobs, s);
    else
        launch_k<F, 2>(jobs, s);
}

}  // namespace

bool gemv_split_supported(const float* x, int64_t ldx, const WeightRef& w, int64_t n) {
    return n >= 1 && n <= 2 && gemv_format(w) >= 0 && in_dim_ok(w.in_dim) && w.out_dim > 0 &&
           reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
}

bool gemv_split_same_launch(const SplitJob& a, const SplitJob& b) {
    return gemv_format(a.w) == gemv_format(b.w) && a.w.in_dim == b.w.in_dim;
}

void launch_gemv_split(const SplitJobs& jobs, int64_t n, Stream s) {
    if (jobs.count == 0) return;
    const cudaStream_t st = as_stream(s);
    switch (gemv_format(jobs.job[0].w)) {
        case kF32:
            launch_f<kF32>(jobs, n, st);
            break;
        case kBF16:
            launch_f<kBF16>(jobs, n, st);
            break;
        case kF16:
            launch_f<kF16>(jobs, n, st);
            break;
        case kFp8:
            launch_f<kFp8>(jobs, n, st);
            break;
        default:
            launch_f<kFp4>(jobs, n, st);
            break;
    }
}

void launch_gemv_split(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n,
                       Stream s, bool quant) {
    SplitJobs jobs;
    jobs.job[0] = {x, ldx, w, y, ldy, quant};
    jobs.count = 1;
    launch_gemv_split(jobs, n, s);
}

}  // namespace di::cuda
