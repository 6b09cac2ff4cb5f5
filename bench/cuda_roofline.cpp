#include "cuda_roofline.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "ops/cuda/cuda_check.h"

namespace di::bench {
namespace {

template <class F>
double median_ms(F&& f, int reps) {
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    std::vector<float> t;
    for (int i = 0; i < 3; ++i) f();
    for (int i = 0; i < reps; ++i) {
        cudaEventRecord(a);
        f();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        t.push_back(ms);
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

__attribute__((unused)) void fill_random(void* p, size_t bytes) {
    std::vector<uint8_t> h(bytes);
    uint32_t s = 12345;
    for (auto& x : h) {
        s = s * 1664525u + 1013904223u;
        x = uint8_t(s >> 24);
        if ((x & 0x7f) == 0x7f) x = 0x3c;  // no fp8/bf16 NaN patterns
    }
    DI_CUDA_CHECK(cudaMemcpy(p, h.data(), bytes, cudaMemcpyHostToDevice));
}

struct Lt {
    void* lib = nullptr;
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtMatmulDescCreate) desc_create;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmul) matmul;
    bool load() {
        for (const char* n :
             {"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13", "libcublasLt.so"})
            if ((lib = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
        if (!lib) return false;
#define SYM(v, name)                                      \
    v = reinterpret_cast<decltype(v)>(dlsym(lib, #name)); \
    if (!v) return false
        SYM(create, cublasLtCreate);
        SYM(desc_create, cublasLtMatmulDescCreate);
        SYM(desc_set, cublasLtMatmulDescSetAttribute);
        SYM(layout_create, cublasLtMatrixLayoutCreate);
        SYM(pref_create, cublasLtMatmulPreferenceCreate);
        SYM(pref_set, cublasLtMatmulPreferenceSetAttribute);
        SYM(heuristic, cublasLtMatmulAlgoGetHeuristic);
        SYM(matmul, cublasLtMatmul);
#undef SYM
        return true;
    }
};

// D[n x n] = A^T B (TN, as cuBLASLt's FP8 path requires), f32 accumulation. Returns TFLOP/s or 0.
double gemm_rate(Lt& lt, cublasLtHandle_t h, cudaDataType_t in_t, int n, std::string& note) {
    const size_t es = in_t == CUDA_R_16BF ? 2 : 1;
    void *A, *B, *D, *ws;
    const size_t ws_bytes = 64u << 20;
    DI_CUDA_CHECK(cudaMalloc(&A, size_t(n) * n * es));
    DI_CUDA_CHECK(cudaMalloc(&B, size_t(n) * n * es));
    DI_CUDA_CHECK(cudaMalloc(&D, size_t(n) * n * 2));
    DI_CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    fill_random(A, size_t(n) * n * es);  // random data: zeros run faster than real data
    fill_random(B, size_t(n) * n * es);
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    lt.desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
    lt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof(T));
    lt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof(N));
    lt.layout_create(&la, in_t, n, n, n);
    lt.layout_create(&lb, in_t, n, n, n);
    lt.layout_create(&ld, CUDA_R_16BF, n, n, n);
    cublasLtMatmulPreference_t pref;
    lt.pref_create(&pref);
    lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    double tflops = 0;
    if (lt.heuristic(h, desc, la, lb, ld, ld, pref, 1, &res, &found) == CUBLAS_STATUS_SUCCESS && found > 0) {
        const float alpha = 1, beta = 0;
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        const double ms = median_ms(
            [&] {
                st = lt.matmul(h, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &res.algo, ws, ws_bytes,
                               nullptr);
            },
            10);
        if (st == CUBLAS_STATUS_SUCCESS)
            tflops = 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12;
        else
            note += " matmul failed (" + std::to_string(int(st)) + ");";
    } else {
        note += std::string(in_t == CUDA_R_16BF ? " bf16" : " fp8") + ": no cuBLASLt algorithm;";
    }
    cudaFree(A), cudaFree(B), cudaFree(D), cudaFree(ws);
    return tflops;
}

}  // namespace

Roofline measure_roofline(int gemm_n) {
    Roofline r;
    const size_t bytes = size_t(2) << 30;
    void *a, *b;
    DI_CUDA_CHECK(cudaMalloc(&a, bytes));
    DI_CUDA_CHECK(cudaMalloc(&b, bytes));
    fill_random(a, bytes);
    const double ms = median_ms([&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); }, 20);
    r.copy_gbps = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
    cudaFree(a), cudaFree(b);
    Lt lt;
    cublasLtHandle_t h;
    if (!lt.load() || lt.create(&h) != CUBLAS_STATUS_SUCCESS) {
        r.note = "libcublasLt.so.13 not loadable: no GEMM ceiling";
        return r;
    }
    r.bf16_tflops = gemm_rate(lt, h, CUDA_R_16BF, gemm_n, r.note);
    r.fp8_tflops = gemm_rate(lt, h, CUDA_R_8F_E4M3, gemm_n, r.note);
    return r;
}

}  // namespace di::bench
