// What a dependency between two decode ops costs when nothing else is in the way: a chain of empty kernels in
// a CUDA graph (launched plainly, or started early by programmatic dependent launch as the decode kernels
// are: early_launch.cuh), against one persistent grid that crosses the same number of grid-wide barriers
// (cooperative groups' grid.sync, and a counter-and-generation barrier on the L2). Every step writes a word
// that the next step's blocks read, so a step cannot finish before its predecessor's writes are visible.
// What it answers: whether a persistent decode kernel's barriers (one per dependent op, ~33 a layer) cost
// less than the launches they replace (docs/cuda.md, "Known gaps").
//   grid_sync_probe [steps=2000]   (one line per blocks-an-SM: microseconds a kernel and a barrier; bad:
//   steps that read a stale word, which must be 0)
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "ops/cuda/cuda_check.h"

namespace {

namespace cg = cooperative_groups;

// One step of a chain: every block reads the word the previous step wrote, block 0 writes the next one.
__global__ void step_kernel(unsigned* word, unsigned expect, int* bad, bool early) {
    if (early) asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x == 0 && *reinterpret_cast<volatile unsigned*>(word) != expect) atomicAdd(bad, 1);
    __syncthreads();
    if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (blockIdx.x == 0 && threadIdx.x == 0) *word = expect + 1;
}

// The counter-and-generation barrier: the last block to arrive resets the counter and bumps the generation.
__device__ void l2_barrier(unsigned* count, unsigned* gen, unsigned blocks) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned* g = gen;
        const unsigned mine = *g;
        __threadfence();
        if (atomicAdd(count, 1u) == blocks - 1) {
            *count = 0;
            __threadfence();
            atomicAdd(gen, 1u);
        } else {
            while (*g == mine) {
            }
        }
        __threadfence();
    }
    __syncthreads();
}

template <bool kCg>
__global__ void persistent_kernel(unsigned* word, unsigned* count, unsigned* gen, int steps, int* bad) {
    volatile unsigned* w = word;
    for (int s = 0; s < steps; ++s) {
        if (threadIdx.x == 0 && *w != unsigned(s)) atomicAdd(bad, 1);
        if constexpr (kCg)
            cg::this_grid().sync();
        else
            l2_barrier(count, gen, gridDim.x);
        if (blockIdx.x == 0 && threadIdx.x == 0) *w = unsigned(s + 1);
        if constexpr (kCg)
            cg::this_grid().sync();
        else
            l2_barrier(count, gen, gridDim.x);
    }
}

struct Buffers {
    unsigned *word, *count, *gen;
    int* bad;
};

void reset(const Buffers& b) {
    DI_CUDA_CHECK(cudaMemset(b.word, 0, 4));
    DI_CUDA_CHECK(cudaMemset(b.count, 0, 4));
    DI_CUDA_CHECK(cudaMemset(b.gen, 0, 4));
    DI_CUDA_CHECK(cudaMemset(b.bad, 0, 4));
    DI_CUDA_CHECK(
        cudaDeviceSynchronize());  // before a launch on a non-blocking stream, which does not wait for them
}

int bad_count(const Buffers& b) {
    int bad = 0;
    DI_CUDA_CHECK(cudaMemcpy(&bad, b.bad, 4, cudaMemcpyDeviceToHost));
    return bad;
}

// Milliseconds of launch(stream) in its second run (the first warms up), the buffers reset before each.
template <class Launch>
float second_run_ms(const Buffers& b, cudaStream_t s, Launch&& launch) {
    cudaEvent_t e0, e1;
    DI_CUDA_CHECK(cudaEventCreate(&e0));
    DI_CUDA_CHECK(cudaEventCreate(&e1));
    float ms = 0;
    for (int rep = 0; rep < 2; ++rep) {
        reset(b);
        DI_CUDA_CHECK(cudaEventRecord(e0, s));
        launch(s);
        DI_CUDA_CHECK(cudaEventRecord(e1, s));
        DI_CUDA_CHECK(cudaStreamSynchronize(s));
        DI_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    }
    DI_CUDA_CHECK(cudaEventDestroy(e0));
    DI_CUDA_CHECK(cudaEventDestroy(e1));
    return ms;
}

// A graph of `steps` step kernels on `blocks` blocks; microseconds a step of its second replay.
double chain(const Buffers& b, int steps, int blocks, bool early) {
    cudaStream_t s;
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    DI_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < steps; ++i) {
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = early ? 1 : 0;
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(unsigned(blocks));
        cfg.blockDim = dim3(128);
        cfg.stream = s;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, step_kernel, b.word, unsigned(i), b.bad, early));
    }
    DI_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x;
    DI_CUDA_CHECK(cudaGraphInstantiate(&x, g, 0));
    const float ms = second_run_ms(b, s, [&](cudaStream_t st) { DI_CUDA_CHECK(cudaGraphLaunch(x, st)); });
    DI_CUDA_CHECK(cudaGraphExecDestroy(x));
    DI_CUDA_CHECK(cudaGraphDestroy(g));
    DI_CUDA_CHECK(cudaStreamDestroy(s));
    return 1e3 * ms / steps;
}

// One cooperative grid of `blocks` blocks crossing 2 * steps barriers (one before a step's write, so no block
// still reads the old word, one after it); microseconds a barrier. A decode kernel with double-buffered
// activations needs one barrier a dependent op.
template <bool kCg>
double persistent(const Buffers& b, int steps, int blocks) {
    unsigned *word = b.word, *count = b.count, *gen = b.gen;
    int* bad = b.bad;
    int n = steps;
    void* args[] = {&word, &count, &gen, &n, &bad};
    const float ms = second_run_ms(b, nullptr, [&](cudaStream_t st) {
        DI_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistent_kernel<kCg>),
                                                  dim3(unsigned(blocks)), dim3(128), args, 0, st));
    });
    return 1e3 * ms / (2.0 * steps);
}

}  // namespace

int main(int argc, char** argv) {
    const int steps = argc > 1 ? std::atoi(argv[1]) : 2000;
    cudaDeviceProp prop{};
    DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    Buffers b{};
    DI_CUDA_CHECK(cudaMalloc(&b.word, 4));
    DI_CUDA_CHECK(cudaMalloc(&b.count, 4));
    DI_CUDA_CHECK(cudaMalloc(&b.gen, 4));
    DI_CUDA_CHECK(cudaMalloc(&b.bad, 4));
    std::printf("%s, %d SMs, %d steps\n", prop.name, sms, steps);
    for (int per_sm : {1, 2}) {
        const int blocks = sms * per_sm;
        const double plain = chain(b, steps, blocks, false);
        const int bad_plain = bad_count(b);
        const double early = chain(b, steps, blocks, true);
        const int bad_early = bad_count(b);
        const double grid = persistent<true>(b, steps, blocks);
        const int bad_grid = bad_count(b);
        const double l2 = persistent<false>(b, steps, blocks);
        const int bad_l2 = bad_count(b);
        std::printf(
            "%d blocks of 128: us a kernel in a graph %.2f (bad %d), early-launched %.2f (bad %d); us a "
            "barrier "
            "in one persistent grid: grid.sync %.2f (bad %d), L2 counter %.2f (bad %d)\n",
            blocks, plain, bad_plain, early, bad_early, grid, bad_grid, l2, bad_l2);
    }
    return 0;
}
