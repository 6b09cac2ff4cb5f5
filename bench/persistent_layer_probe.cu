// The ceiling of a persistent batch-1 decode kernel, measured before building one (docs/cuda.md, "Known
// gaps"). One V4-Flash layer at batch 1 is modelled as its chain of dependent phases: weight streams (FP8
// rows of 4,096 bytes dotted with a 4,096-float input that the previous stream wrote, as the decode GEMVs do)
// and latency-bound phases (mHC's finish, norms, attention at a short context, route: one warp spinning for
// the time the present kernels take), with the bytes and times of the 16-layer step's timeline. Run as
//   graph:       one kernel a phase in a CUDA graph (the present design's skeleton), and with the latency
//                kernels' spare blocks sending the next stream's first 32 MB to the L2;
//   persistent:  one cooperative grid, a grid barrier between phases;
//   + registers: each warp loads its first rows of the next stream before waiting at the barrier;
//   + prefetch:  each block copies the next stream's first rows (up to 192 KB) into shared memory with
//                cp.async at the end of the stream before it, so latency phases overlap the copies (rows a
//                route picks cannot be fetched before the route: those phases' routed parts are excluded);
//   TMA ring:    a producer warp a block streams every row of the block's slices through a ring of six
//                32 KB shared-memory slots by bulk copies (cp.async.bulk, mbarriers) and fills the ring with
//                the next stream's fetchable rows before each barrier, so they arrive during the barriers
//                and latency phases; eight consumer warps dot the rows from shared memory.
// Each with the latency phases as measured and scaled (--latency-scale), and without them.
//   persistent_layer_probe [layers=8] [rounds=5] [latency scales...=1 0.5 0]
#include <cooperative_groups.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/wgmma.cuh"

namespace {

namespace cg = cooperative_groups;
namespace wg = di::cuda::wg;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kRowBytes = 4096;                        // an FP8 row of K = 4,096
constexpr int kLoads = kRowBytes / (32 * 16);          // 16-byte loads a lane a row
constexpr int kPrefetchBytes = 192 * 1024;             // shared memory a block (one an SM) fetches ahead
constexpr int kSmem = kPrefetchBytes + kRowBytes * 4;  // + the input as floats
constexpr int kMaxPhases = 16;

// One phase: a stream of `rows` rows (the first `fetchable` of them known before the phase's inputs), or a
// latency phase of `ns` on one warp.
struct Phase {
    long long rows = 0, fetchable = 0;
    long long ns = 0;
};
struct Plan {
    Phase phase[kMaxPhases];
    int count = 0;
    int layers = 0;
    long long layer_rows = 0;  // rows of a layer: the weights of layer l start at l * layer_rows
    int mode = 0;              // 0 barriers only, 1 + registers, 2 + shared-memory prefetch, 3 TMA ring
};

__device__ __forceinline__ long long now_ns() {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ float dot16(uint4 w, const float* x) {
    const __nv_fp8x2_storage_t* p = reinterpret_cast<const __nv_fp8x2_storage_t*>(&w);
    float s = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(p[i], __NV_E4M3);
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
        s = fmaf(f.x, x[2 * i], s);
        s = fmaf(f.y, x[2 * i + 1], s);
    }
    return s;
}

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// A block's slice [begin, end) of n rows split over `blocks`.
__device__ __forceinline__ void slice(long long n, int b, int blocks, long long& begin, long long& end) {
    begin = n * b / blocks, end = n * (b + 1) / blocks;
}

__device__ __forceinline__ void load_row(const uint8_t* row, uint4 (&r)[kLoads]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) r[i] = __ldcs(reinterpret_cast<const uint4*>(row + i * 512 + lane * 16));
}

__device__ __forceinline__ float row_dot(const uint4 (&r)[kLoads], const float* x) {
    const int lane = threadIdx.x & 31;
    float s = 0;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) s += dot16(r[i], x + i * 512 + lane * 16);
    return warp_sum(s);
}

// row_dot of a row in shared memory.
__device__ __forceinline__ float smem_row_dot(const uint8_t* row, const float* x) {
    const int lane = threadIdx.x & 31;
    uint4 a[kLoads];
#pragma unroll
    for (int q = 0; q < kLoads; ++q) a[q] = *reinterpret_cast<const uint4*>(row + q * 512 + lane * 16);
    return row_dot(a, x);
}

// A latency phase: the calling thread waits out `ns`.
__device__ __forceinline__ void spin_ns(long long ns) {
    const long long until = now_ns() + ns;
    while (now_ns() < until) {
    }
}

// The block's rows of a phase: [f0, f1) of its fetchable rows, then [n0, n1) of the rest.
__device__ __forceinline__ void block_rows(const Phase& p, int blocks, long long& f0, long long& f1,
                                           long long& n0, long long& n1) {
    slice(p.fetchable, blockIdx.x, blocks, f0, f1);
    slice(p.rows - p.fetchable, blockIdx.x, blocks, n0, n1);
    n0 += p.fetchable, n1 += p.fetchable;
}

// Rows [begin, end) of a stream, a warp a row, two rows in flight a warp; `held` a row loaded before.
__device__ void stream_rows(const uint8_t* w, long long begin, long long end, const float* x, float* y,
                            bool have_held, uint4 (&held)[kLoads]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    long long r = begin + warp;
    if (have_held && r < end) {
        const float s = row_dot(held, x);
        if (lane == 0) y[r] = s;
        r += kWarps;
    }
    for (; r + kWarps < end; r += 2 * kWarps) {
        uint4 a[kLoads], b[kLoads];
        load_row(w + r * kRowBytes, a);
        load_row(w + (r + kWarps) * kRowBytes, b);
        const float sa = row_dot(a, x), sb = row_dot(b, x);
        if (lane == 0) y[r] = sa, y[r + kWarps] = sb;
    }
    if (r < end) {
        uint4 a[kLoads];
        load_row(w + r * kRowBytes, a);
        const float s = row_dot(a, x);
        if (lane == 0) y[r] = s;
    }
}

__device__ __forceinline__ void cp_async16(void* smem, const void* g) {
    const unsigned s = unsigned(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g) : "memory");
}

// The rows of `p` this block computes first from shared memory: the start of its fetchable slice.
__device__ __forceinline__ long long fetched_rows(const Phase& p, int blocks) {
    long long b0, b1;
    slice(p.fetchable, blockIdx.x, blocks, b0, b1);
    const long long fit = kPrefetchBytes / kRowBytes;
    return b1 - b0 < fit ? b1 - b0 : fit;
}

__device__ void prefetch(const uint8_t* w, const Phase& p, int blocks, uint8_t* buf) {
    long long b0, b1;
    slice(p.fetchable, blockIdx.x, blocks, b0, b1);
    const long long bytes = fetched_rows(p, blocks) * kRowBytes;
    const uint8_t* src = w + b0 * kRowBytes;
    for (long long o = threadIdx.x * 16; o < bytes; o += kThreads * 16) cp_async16(buf + o, src + o);
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// The first stream phase after phase i of layer l: (j, lj), lj == layers when none.
__device__ void next_stream(const Plan& plan, int i, int l, int& j, int& lj) {
    j = i + 1, lj = l;
    for (;; ++j) {
        if (j == plan.count) j = 0, ++lj;
        if (lj >= plan.layers || plan.phase[j].rows > 0) return;
    }
}

// Phase i's weights in layer l: rows from l * layer_rows + the rows of the phases before it.
__device__ const uint8_t* phase_weights(const Plan& plan, const uint8_t* weights, int l, int i) {
    long long r = l * plan.layer_rows;
    for (int q = 0; q < i; ++q) r += plan.phase[q].rows;
    return weights + r * kRowBytes;
}

// The layer's phases in order; a stream's output is the next stream's input (two buffers of 65,536).
__global__ void __launch_bounds__(kThreads, 1)
    persistent_kernel(const __grid_constant__ Plan plan, const uint8_t* weights, float* act) {
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t* buf = smem;
    float* x = reinterpret_cast<float*>(smem + kPrefetchBytes);
    cg::grid_group grid = cg::this_grid();
    const int blocks = int(gridDim.x), lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    int in = 0;                               // the act buffer the next stream reads
    bool fetched = false, have_held = false;  // what this block / warp holds of the next stream
    uint4 held[kLoads];
    for (int l = 0; l < plan.layers; ++l) {
        for (int i = 0; i < plan.count; ++i) {
            const Phase& p = plan.phase[i];
            if (p.rows == 0) {  // latency: one warp waits it out, the others go on to the barrier
                if (blockIdx.x == 0 && warp == 0) spin_ns(p.ns);
                grid.sync();
                continue;
            }
            const uint8_t* w = phase_weights(plan, weights, l, i);
            long long f0, f1, n0, n1;
            block_rows(p, blocks, f0, f1, n0, n1);
            for (int k = threadIdx.x; k < kRowBytes; k += kThreads)
                x[k] = act[in * 65536 + k] * 1e-3f;  // kept finite over the layers
            asm volatile("cp.async.wait_all;" ::: "memory");
            __syncthreads();
            float* y = act + (1 - in) * 65536;
            const long long from_smem = fetched ? fetched_rows(p, blocks) : 0;
            for (long long r = warp; r < from_smem; r += kWarps) {
                const float s = smem_row_dot(buf + r * kRowBytes, x);
                if (lane == 0) y[f0 + r] = s;
            }
            stream_rows(w, f0 + from_smem, f1, x, y, have_held, held);
            stream_rows(w, n0, n1, x, y, false, held);
            __syncthreads();  // the shared rows read before they are refilled
            // What the next stream needs before its input: its first rows, in registers or shared memory.
            fetched = have_held = false;
            int j, lj;
            next_stream(plan, i, l, j, lj);
            if (lj < plan.layers && plan.phase[j].fetchable > 0) {
                const uint8_t* wj = phase_weights(plan, weights, lj, j);
                long long g0, g1;
                slice(plan.phase[j].fetchable, blockIdx.x, blocks, g0, g1);
                if (plan.mode == 1 && g0 + warp < g1) {
                    load_row(wj + (g0 + warp) * kRowBytes, held);
                    have_held = true;
                } else if (plan.mode == 2) {
                    prefetch(wj, plan.phase[j], blocks, buf);
                    fetched = true;
                }
            }
            in = 1 - in;
            grid.sync();
        }
    }
}

// The TMA ring (mode 3): warps 0-7 consume, warp 8 produces. A block's chunks of a phase: its fetchable
// slice, then the rest, kSlotRows rows a chunk (one slot); producer and consumers walk the same order, so the
// n-th chunk issued is the n-th consumed (slot n % kSlots, phase parity (n / kSlots) & 1).
constexpr int kConsumers = 8, kRingThreads = 32 * (kConsumers + 1);
constexpr int kSlotRows = kConsumers, kSlotBytes = kSlotRows * kRowBytes, kSlots = 6;
constexpr int kRingSmem = kSlots * kSlotBytes + kRowBytes * 4 + 2 * kSlots * 8;

struct Chunks {
    long long f0, f1, n0, n1;  // the block's fetchable rows and the rest
    int fetchable, total;      // chunks
    __device__ Chunks(const Phase& p, int blocks) {
        block_rows(p, blocks, f0, f1, n0, n1);
        fetchable = int((f1 - f0 + kSlotRows - 1) / kSlotRows);
        total = fetchable + int((n1 - n0 + kSlotRows - 1) / kSlotRows);
    }
    // chunk c's first row and row count
    __device__ int rows(int c, long long& first) const {
        first = c < fetchable ? f0 + (long long)c * kSlotRows : n0 + (long long)(c - fetchable) * kSlotRows;
        const long long end = c < fetchable ? f1 : n1;
        return int(end - first < kSlotRows ? end - first : kSlotRows);
    }
};

__global__ void __launch_bounds__(kRingThreads, 1)
    ring_kernel(const __grid_constant__ Plan plan, const uint8_t* weights, float* act) {
    extern __shared__ __align__(16) uint8_t smem[];
    float* x = reinterpret_cast<float*>(smem + kSlots * kSlotBytes);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + kSlots * kSlotBytes + kRowBytes * 4);
    uint64_t* empty = full + kSlots;
    cg::grid_group grid = cg::this_grid();
    const int blocks = int(gridDim.x), lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kSlots; ++s) {
            wg::mbar_init(wg::smem_addr(full + s), 1);
            wg::mbar_init(wg::smem_addr(empty + s), kConsumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == kConsumers) {  // the producer: lane 0 issues, the warp keeps the grid's barriers
        long long issued = 0;
        int ahead = 0;  // chunks of the next stream phase issued before its barrier
        // chunk c of phase i of layer l into the next slot, once that slot's previous chunk was consumed
        auto issue = [&](int l, int i, int c) {
            const int slot = int(issued % kSlots);
            if (lane == 0) {
                wg::mbar_wait(wg::smem_addr(empty + slot), uint32_t((issued / kSlots) & 1) ^ 1u);
                const Chunks ch(plan.phase[i], blocks);
                long long first;
                const uint32_t bytes = uint32_t(ch.rows(c, first)) * kRowBytes;
                wg::mbar_arrive_expect_tx(wg::smem_addr(full + slot), bytes);
                wg::bulk_copy_g2s(wg::smem_addr(smem + slot * kSlotBytes),
                                  phase_weights(plan, weights, l, i) + first * kRowBytes, bytes,
                                  wg::smem_addr(full + slot));
            }
            __syncwarp();
            ++issued;
        };
        for (int l = 0; l < plan.layers; ++l)
            for (int i = 0; i < plan.count; ++i) {
                if (plan.phase[i].rows > 0) {
                    const int total = Chunks(plan.phase[i], blocks).total;
                    for (int c = ahead; c < total; ++c) issue(l, i, c);
                    ahead = 0;
                }
                // Ahead of the barrier: the next stream's fetchable chunks, at most a ring of them, so each
                // waits only for a slot of this phase or an earlier one, which the consumers free without
                // the barrier (the last of this phase's chunks first, then the copies start at once).
                int j, lj;
                next_stream(plan, i, l, j, lj);
                if (lj < plan.layers) {
                    const int fetchable = Chunks(plan.phase[j], blocks).fetchable;
                    for (; ahead < fetchable && ahead < kSlots; ++ahead) issue(lj, j, ahead);
                }
                grid.sync();
            }
        return;
    }
    long long used = 0;
    int in = 0;
    for (int l = 0; l < plan.layers; ++l)
        for (int i = 0; i < plan.count; ++i) {
            const Phase& p = plan.phase[i];
            if (p.rows == 0) {
                if (blockIdx.x == 0 && warp == 0) spin_ns(p.ns);
                grid.sync();
                continue;
            }
            for (int k = threadIdx.x; k < kRowBytes; k += kConsumers * 32) x[k] = act[in * 65536 + k] * 1e-3f;
            wg::named_sync(1, kConsumers * 32);
            float* y = act + (1 - in) * 65536;
            const Chunks ch(p, blocks);
            for (int c = 0; c < ch.total; ++c, ++used) {
                const int slot = int(used % kSlots);
                wg::mbar_wait(wg::smem_addr(full + slot), uint32_t((used / kSlots) & 1));
                long long first;
                const int n = ch.rows(c, first);
                if (warp < n) {
                    const float s = smem_row_dot(smem + slot * kSlotBytes + warp * kRowBytes, x);
                    if (lane == 0) y[first + warp] = s;
                }
                __syncwarp();
                if (lane == 0) wg::mbar_arrive(wg::smem_addr(empty + slot));
            }
            in = 1 - in;
            grid.sync();
        }
}

// The graph skeleton's kernels: a stream phase on its own grid, a latency phase on one warp.
__global__ void __launch_bounds__(kThreads, 1)
    stream_kernel(const uint8_t* w, long long rows, const float* xin, float* y) {
    extern __shared__ __align__(16) uint8_t smem[];
    float* x = reinterpret_cast<float*>(smem);
    for (int k = threadIdx.x; k < kRowBytes; k += kThreads) x[k] = xin[k] * 1e-3f;
    __syncthreads();
    long long b0, b1;
    slice(rows, blockIdx.x, gridDim.x, b0, b1);
    uint4 held[kLoads];
    stream_rows(w, b0, b1, x, y, false, held);
}

// Block 0's first warp waits out the latency; with `next`, the other blocks send the first `bytes` of the
// next stream to the L2 meanwhile (the memory system is idle in a latency phase; up to kL2Bytes).
constexpr long long kL2Bytes = 32ll << 20;
__global__ void latency_kernel(long long ns, const uint8_t* next, long long bytes) {
    if (blockIdx.x == 0) {
        if (threadIdx.x < 32) spin_ns(ns);
        return;
    }
    const long long step = (long long)(gridDim.x - 1) * blockDim.x * 128;
    for (long long o = ((long long)(blockIdx.x - 1) * blockDim.x + threadIdx.x) * 128; o < bytes; o += step)
        asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(next + o));
}

struct LayerModel {
    const char* name;
    double mb;         // 0: a latency phase
    double fetchable;  // the part of the bytes known before the phase's inputs
    double us;         // latency phases: today's kernels' time (docs/benchmarks.md, the 2026-12-04 timeline)
};

// One sliding-window V4-Flash layer at batch 1 (bytes: v4_decode_bytes.py's parts; latency: the timeline).
const LayerModel kLayer[] = {
    {"mHC pre sums", 1.57, 1.57, 0},
    {"mHC finish", 0, 0, 10.5},
    {"wq_a + wkv", 6.3, 6.3, 0},
    {"q norm", 0, 0, 2.5},
    {"wq_b", 33.5, 33.5, 0},
    {"norm + rope, store", 0, 0, 3.0},
    {"attention", 0, 0, 14.0},
    {"wo_a", 33.5, 33.5, 0},
    {"wo_b", 33.5, 33.5, 0},
    {"mHC post + pre sums", 1.57, 1.57, 0},
    {"mHC finish", 0, 0, 10.5},
    {"gate", 2.1, 2.1, 0},
    {"route", 0, 0, 5.0},
    {"shared w1 w3 + routed up", 70.3, 16.8, 0},
    {"shared w2 + routed down", 35.1, 8.4, 0},
    {"combine, mHC post", 0, 0, 2.0},
};

Plan make_plan(int layers, double latency_scale, int mode) {
    Plan p{};
    p.layers = layers, p.mode = mode;
    for (const LayerModel& m : kLayer) {
        Phase& ph = p.phase[p.count++];
        ph.rows = (long long)(m.mb * 1e6 / kRowBytes);
        ph.fetchable = (long long)(m.fetchable * 1e6 / kRowBytes);
        ph.ns = (long long)(m.us * 1e3 * latency_scale);
        p.layer_rows += ph.rows;
    }
    return p;
}

float time_ms(cudaStream_t s, int rounds, const std::function<void()>& run) {
    cudaEvent_t e0, e1;
    DI_CUDA_CHECK(cudaEventCreate(&e0));
    DI_CUDA_CHECK(cudaEventCreate(&e1));
    run();  // warm-up
    DI_CUDA_CHECK(cudaEventRecord(e0, s));
    for (int r = 0; r < rounds; ++r) run();
    DI_CUDA_CHECK(cudaEventRecord(e1, s));
    DI_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    DI_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    DI_CUDA_CHECK(cudaEventDestroy(e0));
    DI_CUDA_CHECK(cudaEventDestroy(e1));
    return ms / float(rounds);
}

}  // namespace

int main(int argc, char** argv) {
    const int layers = argc > 1 ? std::atoi(argv[1]) : 8, rounds = argc > 2 ? std::atoi(argv[2]) : 5;
    std::vector<double> scales;
    for (int i = 3; i < argc; ++i) scales.push_back(std::atof(argv[i]));
    if (scales.empty()) scales = {1.0, 0.5, 0.0};
    cudaDeviceProp prop{};
    DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t s;
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    const Plan shape = make_plan(layers, 1.0, 0);
    const size_t bytes = size_t(shape.layer_rows) * layers * kRowBytes;
    uint8_t* weights = nullptr;
    float* act = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&weights, bytes));
    DI_CUDA_CHECK(cudaMalloc(&act, 2 * 65536 * sizeof(float)));
    DI_CUDA_CHECK(cudaMemset(weights, 0x3a, bytes));  // e4m3 0x3a: a finite value
    DI_CUDA_CHECK(cudaMemset(act, 0, 2 * 65536 * sizeof(float)));

    // The copy bandwidth of this run: 2 GB device to device, reads + writes.
    const size_t cb = size_t(1) << 30;
    void *c0, *c1;
    DI_CUDA_CHECK(cudaMalloc(&c0, cb));
    DI_CUDA_CHECK(cudaMalloc(&c1, cb));
    const float copy_ms =
        time_ms(s, 10, [&] { DI_CUDA_CHECK(cudaMemcpyAsync(c1, c0, cb, cudaMemcpyDeviceToDevice, s)); });
    const double bw = 2.0 * double(cb) / (copy_ms * 1e-3);
    DI_CUDA_CHECK(cudaFree(c0));
    DI_CUDA_CHECK(cudaFree(c1));
    const double layer_bytes = double(shape.layer_rows) * kRowBytes;
    const double bound_us = layer_bytes / bw * 1e6;
    std::printf("%s, %d SMs; copy bandwidth %.0f GB/s; %d layers of %.1f MB: bound %.1f us a layer\n",
                prop.name, prop.multiProcessorCount, bw / 1e9, layers, layer_bytes / 1e6, bound_us);

    DI_CUDA_CHECK(
        cudaFuncSetAttribute(persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    DI_CUDA_CHECK(
        cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kRowBytes * 4));
    DI_CUDA_CHECK(cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingSmem));
    int per_sm = 0;
    DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel, kThreads, kSmem));
    const int blocks = prop.multiProcessorCount;  // one an SM: 255 registers for two rows in flight a warp
    std::printf("grids: %d blocks of %d (%d fit an SM)\n", blocks, kThreads, per_sm);

    for (double scale : scales) {
        // The graph skeleton: a kernel a phase; with `l2`, the latency kernels' spare blocks prefetch.
        const Plan g = make_plan(layers, scale, 0);
        const auto run_graph = [&](bool l2) {
            cudaGraph_t graph;
            DI_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            int in = 0;
            for (int l = 0; l < layers; ++l) {
                long long off = l * g.layer_rows;
                for (int i = 0; i < g.count; ++i) {
                    const Phase& p = g.phase[i];
                    if (p.rows == 0) {
                        long long next = off, ahead = 0;  // the next stream's fetchable rows
                        for (int j = i + 1; j <= g.count && l2; ++j) {
                            const Phase& q = g.phase[j % g.count];
                            if (q.rows > 0) {
                                ahead = std::min(kL2Bytes, q.fetchable * kRowBytes);
                                break;
                            }
                        }
                        if (l == layers - 1 && i + 1 >= g.count) ahead = 0;
                        const int grid = ahead > 0 ? prop.multiProcessorCount : 1;
                        latency_kernel<<<grid, 256, 0, s>>>(p.ns, weights + next * kRowBytes, ahead);
                    } else {
                        stream_kernel<<<prop.multiProcessorCount, kThreads, kRowBytes * 4, s>>>(
                            weights + off * kRowBytes, p.rows, act + in * 65536, act + (1 - in) * 65536);
                        in = 1 - in;
                    }
                    off += p.rows;
                }
            }
            DI_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
            cudaGraphExec_t exec;
            DI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            const float ms = time_ms(s, rounds, [&] { DI_CUDA_CHECK(cudaGraphLaunch(exec, s)); });
            DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
            DI_CUDA_CHECK(cudaGraphDestroy(graph));
            return ms;
        };
        const float graph_ms = run_graph(false), graph_l2_ms = run_graph(true);
        double latency_us = 0;
        for (const LayerModel& m : kLayer) latency_us += m.us * scale;
        std::printf("latency phases x%.2f (%.1f us a layer):\n", scale, latency_us);
        const auto report = [&](const char* what, float ms) {
            const double us = ms * 1e3 / layers;
            std::printf("  %-34s %7.1f us a layer  %5.1f%% of the roofline\n", what, us,
                        100.0 * bound_us / us);
        };
        report("graph, a kernel a phase", graph_ms);
        report("graph + L2 prefetch in latency phases", graph_l2_ms);
        const char* names[] = {"persistent, grid barriers", "persistent + next rows in registers",
                               "persistent + shared-memory prefetch"};
        for (int mode = 0; mode < 3; ++mode) {
            const Plan p = make_plan(layers, scale, mode);
            const uint8_t* w = weights;
            float* a = act;
            void* args[] = {const_cast<Plan*>(&p), &w, &a};
            const float ms = time_ms(s, rounds, [&] {
                DI_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistent_kernel),
                                                          dim3(blocks), dim3(kThreads), args, kSmem, s));
            });
            report(names[mode], ms);
        }
        {
            const Plan p = make_plan(layers, scale, 3);
            const uint8_t* w = weights;
            float* a = act;
            void* args[] = {const_cast<Plan*>(&p), &w, &a};
            const float ms = time_ms(s, rounds, [&] {
                DI_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(ring_kernel), dim3(blocks),
                                                          dim3(kRingThreads), args, kRingSmem, s));
            });
            report("persistent, TMA ring (producer warp)", ms);
        }
    }
    DI_CUDA_CHECK(cudaStreamSynchronize(s));
    return 0;
}
