#include "cuda_bench_util.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "ops/cuda/cuda_check.h"

namespace di::bench {

std::mt19937_64 g_rng(11);

void* random_device(size_t bytes, int kind) {
    std::vector<uint8_t> h(bytes);
    if (kind == 2) {
        std::uniform_real_distribution<float> u(-1, 1);
        for (size_t i = 0; i + 4 <= bytes; i += 4) {
            const float f = u(g_rng);
            std::memcpy(&h[i], &f, 4);
        }
    } else if (kind == 3) {
        std::uniform_real_distribution<float> u(-0.1f, 0.1f);
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            const float f = u(g_rng);
            uint32_t b;
            std::memcpy(&b, &f, 4);
            const uint16_t v = uint16_t(b >> 16);
            std::memcpy(&h[i], &v, 2);
        }
    } else {
        for (size_t i = 0; i < bytes; i += 8) {
            uint64_t r = g_rng();
            std::memcpy(&h[i], &r, std::min<size_t>(8, bytes - i));
        }
        for (auto& b : h) {
            if (kind == 1)
                b = uint8_t(118 + b % 8);
            else if ((b & 0x7f) == 0x7f)
                b = 0x3c;
        }
    }
    void* d = nullptr;
    DI_CUDA_CHECK(cudaMalloc(&d, bytes));
    DI_CUDA_CHECK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
    return d;
}

double graph_us(cudaStream_t s, int reps, const std::function<void(int)>& launch) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    launch(0);  // outside the capture: one-time setup (shared-memory limits, occupancy queries)
    DI_CUDA_CHECK(cudaStreamSynchronize(s));
    DI_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < reps; ++i) launch(i);
    DI_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    DI_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    DI_CUDA_CHECK(cudaGraphLaunch(ge, s));  // warm-up
    DI_CUDA_CHECK(cudaStreamSynchronize(s));
    cudaEvent_t a, b;
    DI_CUDA_CHECK(cudaEventCreate(&a));
    DI_CUDA_CHECK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int k = 0; k < 7; ++k) {
        DI_CUDA_CHECK(cudaEventRecord(a, s));
        DI_CUDA_CHECK(cudaGraphLaunch(ge, s));
        DI_CUDA_CHECK(cudaEventRecord(b, s));
        DI_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        DI_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    cudaGraphExecDestroy(ge), cudaGraphDestroy(g);
    std::sort(t.begin(), t.end());
    return 1000.0 * t[t.size() / 2] / reps;
}

double stream_us(cudaStream_t s, int reps, const std::function<void(int)>& launch) {
    launch(0);
    cudaEvent_t a, b;
    DI_CUDA_CHECK(cudaEventCreate(&a));
    DI_CUDA_CHECK(cudaEventCreate(&b));
    DI_CUDA_CHECK(cudaEventRecord(a, s));
    for (int i = 0; i < reps; ++i) launch(i);
    DI_CUDA_CHECK(cudaEventRecord(b, s));
    DI_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    DI_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a), cudaEventDestroy(b);
    return 1000.0 * double(ms) / reps;
}

std::string rate_table(const std::string& intro, const char* columns, const std::vector<GemmRow>& rows,
                       double peak_tflops, const char* peak) {
    std::string md = intro + "| " + columns + " | time us | TFLOP/s | % of dense " + peak +
                     " |\n|---|---|---:|---:|---:|\n";
    char buf[512];
    for (const GemmRow& g : rows) {
        const double tf = g.us > 0 ? g.flops / (g.us * 1e-6) / 1e12 : 0;
        std::snprintf(buf, sizeof buf, "| %s | %s | %.2f | %.1f | %.1f%% |\n", g.name.c_str(),
                      g.variant.c_str(), g.us, tf, peak_tflops > 0 ? 100.0 * tf / peak_tflops : 0.0);
        md += buf;
    }
    return md;
}

BenchScratch::~BenchScratch() {
    for (auto& [p, b] : slots_) cudaFree(p);
}

void* BenchScratch::get(int slot, size_t bytes) {
    auto& [p, b] = slots_[size_t(slot)];
    if (bytes > b) {
        cudaFree(p);
        DI_CUDA_CHECK(cudaMalloc(&p, bytes));
        b = bytes;
    }
    return p;
}

}  // namespace di::bench
