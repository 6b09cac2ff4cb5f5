// Decode linear at one or two token rows with the weight rows brought into shared memory by the bulk copy
// engine (bulk_copy.cuh). A block's rows are one contiguous byte range; a producer warp keeps it kStages
// stages of kStageBytes deep in flight, so the bytes in flight cost no registers (split_rows, which holds
// them in registers, fits 16 warps per multiprocessor and reads at about half the bandwidth). The consumers
// compute exactly as split_rows does (split_rows.cuh: a thread's 32-element chunk of each row against x in
// registers, the same butterfly, the group's warps in order), so the results are bit-identical to it.
// Launched early (early_launch.cuh): the copies start before the block waits for x.
//   bytes: out * in * bytes/weight + x + y  -> bound by the weight read
#include "ops/cuda/bulk_copy.cuh"
#include "ops/cuda/split_rows.cuh"

namespace di::cuda {
namespace {

using namespace split;

constexpr int kConsumers = 256;  // split_rows' block
constexpr int kThreads = kConsumers + 32;
constexpr int kStages = 4;
constexpr int64_t kStageBytes = 16 * 1024;
constexpr int kMaxPartials = 1024;  // rows * NT * warps floats per block
constexpr size_t kSmem =
    size_t(kStages * kStageBytes) + kMaxPartials * sizeof(float) + 2 * kStages * sizeof(uint64_t);
// Resident blocks per multiprocessor: 3 x 70 KB of shared memory at one token (<= 75 registers); two
// tokens' x slices take more registers, 2 blocks.
template <int NT>
constexpr int kBlocksPerSm = NT == 1 ? 3 : 2;

// grid (row blocks, jobs): rows [row0, row0 + rpc) of job blockIdx.y's matrix against its NT tokens.
template <int F, int NT>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm<NT>)
    gemv_bulk_kernel(const __grid_constant__ SplitJobs jobs, int rpc) {
    extern __shared__ __align__(128) uint8_t smem[];
    allow_early_next();
    const SplitJob& p = jobs.job[blockIdx.y];
    const int64_t row0 = int64_t(blockIdx.x) * rpc;
    if (row0 >= p.w.out_dim) return wait_prior();  // a shorter job of the launch
    const int64_t rb = row_bytes(p.w, F), rows = min(int64_t(rpc), p.w.out_dim - row0);
    const int64_t srows = kStageBytes / rb;  // rows per stage
    const int stages = int((rows + srows - 1) / srows);
    uint8_t* ring = smem;
    float* red = reinterpret_cast<float*>(smem + kStages * kStageBytes);
    uint64_t* full = reinterpret_cast<uint64_t*>(red + kMaxPartials);
    uint64_t* empty = full + kStages;
    const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s)
            bulk::barrier_init(full + s, 1), bulk::barrier_init(empty + s, kConsumers / 32);
        bulk::barrier_init_fence();
    }
    __syncthreads();
    if (warp == kConsumers / 32) {  // the producer: weights, which no earlier kernel writes
        if (lane == 0) {
            const uint8_t* src = static_cast<const uint8_t*>(p.w.data) + row0 * rb;
            for (int k = 0; k < stages; ++k) {
                const int s = k % kStages;
                if (k >= kStages) bulk::wait(empty + s, uint32_t((k / kStages) - 1) & 1u);
                const auto bytes = uint32_t(min(srows, rows - k * srows) * rb);
                bulk::arrive_expect(full + s, bytes);
                bulk::copy(ring + s * kStageBytes, src + k * srows * rb, bytes, full + s);
            }
        }
        return wait_prior();
    }
    constexpr int B = kBatch<F, 1, NT>, V = B * NT, kLog = log2_of<V>();
    const int tpr = int(p.w.in_dim / kChunk), c = int(threadIdx.x) % tpr, wig = c / 32, warps = tpr / 32;
    const int g = int(threadIdx.x) / tpr, groups = kConsumers / tpr;
    wait_prior();
    const float* xp[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) xp[t] = p.x + t * p.ldx;
    float xr[NT][kChunk];
    load_x<NT>(xp, c, xr);
    for (int k = 0; k < stages; ++k) {
        const int s = k % kStages;
        bulk::wait(full + s, uint32_t(k / kStages) & 1u);
        const uint8_t* st = ring + s * kStageBytes;
        const int64_t r_beg = k * srows, r_end = min(r_beg + srows, rows);  // rows of the stage, from row0
        for (int64_t lr0 = r_beg + int64_t(g) * B; lr0 < r_end; lr0 += int64_t(groups) * B) {
            float v[V];
#pragma unroll
            for (int b = 0; b < B; ++b) {
                const int64_t lr = lr0 + b;
                const bool ok = lr < r_end;
                const uint4* src =
                    reinterpret_cast<const uint4*>(st + (ok ? lr - r_beg : 0) * rb) + c * kLoads<F>;
                uint4 q[kLoads<F>];
#pragma unroll
                for (int l = 0; l < kLoads<F>; ++l) q[l] = src[l];
                float part[NT];
                chunk_dot<F, NT>(q, xr, part);
                const float sc = ok ? unit_scale<F>(p.w, row0 + lr, int64_t(c) * kChunk) : 0.0f;
#pragma unroll
                for (int t = 0; t < NT; ++t) v[b * NT + t] = __fmul_rn(part[t], sc);
            }
            warp_multi_sum<V>(v, lane);
            if ((lane & ((32 >> kLog) - 1)) == 0) {
                const int idx = lane >> (5 - kLog), b = idx / NT, t = idx % NT;
                const int64_t lr = lr0 + b;
                if (lr < r_end) red[(lr * NT + t) * warps + wig] = v[0];
            }
        }
        __syncwarp();
        if (lane == 0) bulk::arrive(empty + s);
    }
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");  // the consumers' partials are in red
    for (int64_t i = threadIdx.x; i < rows * NT; i += kConsumers) {
        const int64_t lr = i / NT;
        const int t = int(i % NT);
        p.y[t * p.ldy + row0 + lr] = group_total<NT>(red, 0, lr, t, rpc, warps);
    }
}

template <int F, int NT>
void launch_k(const SplitJobs& jobs, cudaStream_t s) {
    static const bool attr = [] {
        DI_CUDA_CHECK(cudaFuncSetAttribute(gemv_bulk_kernel<F, NT>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
        return true;
    }();
    (void)attr;
    constexpr int b = kBatch<F, 1, NT>;
    const int64_t in = jobs.job[0].w.in_dim;
    int64_t rows = 0, longest = 0;
    for (int j = 0; j < jobs.count; ++j)
        rows += jobs.job[j].w.out_dim, longest = std::max(longest, jobs.job[j].w.out_dim);
    const int64_t gran = (kConsumers / (in / kChunk)) * b, warps = in / kChunk / 32;
    const int64_t most = std::max(gran, kMaxPartials / (NT * warps) / gran * gran);
    const int64_t blocks = int64_t(kBlocksPerSm<NT>) * sm_count(), want = (rows + blocks - 1) / blocks;
    const int64_t rpc = std::min(most, std::max(gran, (want + gran - 1) / gran * gran));
    launch_early(gemv_bulk_kernel<F, NT>, dim3(blocks_for(longest, int(rpc)), unsigned(jobs.count)),
                 dim3(kThreads), kSmem, s, jobs, int(rpc));
}

template <int F>
void launch_f(const SplitJobs& jobs, int64_t n, cudaStream_t s) {
    if (n == 1)
        launch_k<F, 1>(jobs, s);
    else
        launch_k<F, 2>(jobs, s);
}

}  // namespace

bool gemv_bulk_supported(const float* x, int64_t ldx, const WeightRef& w, int64_t n) {
    const int f = gemv_format(w);
    return gemv_split_supported(x, ldx, w, n) && f != kFp4 && row_bytes(w, f) <= kStageBytes;
}

void launch_gemv_bulk(const SplitJobs& jobs, int64_t n, Stream s) {
    if (jobs.count == 0) return;
    const cudaStream_t st = as_stream(s);
    switch (gemv_format(jobs.job[0].w)) {
        case kF32:
            return launch_f<kF32>(jobs, n, st);
        case kBF16:
            return launch_f<kBF16>(jobs, n, st);
        case kF16:
            return launch_f<kF16>(jobs, n, st);
        default:
            return launch_f<kFp8>(jobs, n, st);
    }
}

}  // namespace di::cuda
