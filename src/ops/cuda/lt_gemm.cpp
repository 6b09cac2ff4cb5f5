// cuBLASLt's block-scaled FP8 matmul, loaded with dlopen (the toolkit ships cuBLASLt as a shared library
// only, and a binary that needs none runs wherever the driver does). Layouts (measured on the H200, see
// docs/kernels.md): A = W [out, in] as K x O column-major with op T and BLK128x128 f32 scales
// [out/128][in/128]; B = the activations [n, in] as K x N with op N and VEC128 f32 scales [in/128][n]; D [n,
// out] as O x N.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "ops/cuda/fp8_gemm.h"

namespace di::cuda {

struct LtFp8Gemm::Impl {
    void* lib = nullptr;
    decltype(&cublasLtCreate) create = nullptr;
    decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
    decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
    decltype(&cublasLtMatmul) matmul = nullptr;
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    static constexpr size_t kWorkspace = size_t(32) << 20;

    // One plan per shape: the descriptors and the algorithm the heuristic chose (or none).
    struct Plan {
        bool ok = false, f32_out = false;
        std::string note;  // the heuristic's answers, for reports
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
        cublasLtMatmulAlgo_t algo{};
    };
    using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;  // n, in, out, ldw, ldy
    std::map<Key, Plan> plans;
    std::mutex mu;

    bool load(const char** why) {
        for (const char* name :
             {"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13", "libcublasLt.so"})
            if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
        if (!lib) return *why = "libcublasLt.so.13 not found", false;
#define DI_LT_SYM(v, name)                                \
    v = reinterpret_cast<decltype(v)>(dlsym(lib, #name)); \
    if (!v) return *why = "libcublasLt lacks " #name, false
        DI_LT_SYM(create, cublasLtCreate);
        DI_LT_SYM(desc_create, cublasLtMatmulDescCreate);
        DI_LT_SYM(desc_destroy, cublasLtMatmulDescDestroy);
        DI_LT_SYM(desc_set, cublasLtMatmulDescSetAttribute);
        DI_LT_SYM(layout_create, cublasLtMatrixLayoutCreate);
        DI_LT_SYM(layout_destroy, cublasLtMatrixLayoutDestroy);
        DI_LT_SYM(pref_create, cublasLtMatmulPreferenceCreate);
        DI_LT_SYM(pref_destroy, cublasLtMatmulPreferenceDestroy);
        DI_LT_SYM(pref_set, cublasLtMatmulPreferenceSetAttribute);
        DI_LT_SYM(heuristic, cublasLtMatmulAlgoGetHeuristic);
        DI_LT_SYM(matmul, cublasLtMatmul);
#undef DI_LT_SYM
        if (create(&handle) != CUBLAS_STATUS_SUCCESS) return *why = "cublasLtCreate failed", false;
        if (cudaMalloc(&workspace, kWorkspace) != cudaSuccess)
            return *why = "no memory for the workspace", false;
        return true;
    }

    // A plan writing f32 if cuBLASLt has one for the shape, else bf16, else none; each with split-K partials
    // kept out of the output first (the same bits on every run), then with any reduction. `note` records
    // what the heuristic answered to each try.
    Plan make_plan(int64_t n, int64_t in, int64_t out, int64_t ldw, int64_t ldy) {
        Plan none;
        for (const bool f32 : {true, false})
            for (const bool no_inplace : {true, false}) {
                Plan p;
                desc_create(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
                const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
                desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
                desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
                const cublasLtMatmulMatrixScale_t ma = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                                  mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
                desc_set(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma);
                desc_set(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb);
                // The heuristic wants device scale pointers; run() sets the real ones before each matmul.
                const void* any = workspace;
                desc_set(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &any, sizeof any);
                desc_set(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &any, sizeof any);
                layout_create(&p.la, CUDA_R_8F_E4M3, uint64_t(in), uint64_t(out), ldw);
                layout_create(&p.lb, CUDA_R_8F_E4M3, uint64_t(in), uint64_t(n), in);
                layout_create(&p.ld, f32 ? CUDA_R_32F : CUDA_R_16BF, uint64_t(out), uint64_t(n),
                              f32 ? ldy : out);
                cublasLtMatmulPreference_t pref;
                pref_create(&pref);
                size_t ws = kWorkspace;
                pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
                if (no_inplace) {
                    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE |
                                             CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                                             CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
                    pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes);
                }
                cublasLtMatmulHeuristicResult_t res{};
                int found = 0;
                const cublasStatus_t st =
                    heuristic(handle, p.desc, p.la, p.lb, p.ld, p.ld, pref, 1, &res, &found);
                pref_destroy(pref);
                none.note += std::string(none.note.empty() ? "" : "; ") + (f32 ? "f32" : "bf16") + " out" +
                             (no_inplace ? "" : " any reduction") + ": status " + std::to_string(int(st)) +
                             ", " + std::to_string(found) + " found";
                if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
                    p.ok = true, p.f32_out = f32, p.algo = res.algo, p.note = none.note;
                    return p;
                }
                desc_destroy(p.desc), layout_destroy(p.la), layout_destroy(p.lb), layout_destroy(p.ld);
            }
        return none;
    }

    Plan& plan(int64_t n, int64_t in, int64_t out, int64_t ldw, int64_t ldy) {
        std::lock_guard lk(mu);
        const Key k{n, in, out, ldw, ldy};
        auto it = plans.find(k);
        if (it == plans.end()) it = plans.emplace(k, make_plan(n, in, out, ldw, ldy)).first;
        return it->second;
    }
};

LtFp8Gemm* LtFp8Gemm::instance(const char** why) {
    static const char* reason = nullptr;
    static LtFp8Gemm* one = [] {
        auto* impl = new Impl;
        if (!impl->load(&reason)) return static_cast<LtFp8Gemm*>(nullptr);
        return new LtFp8Gemm(impl);
    }();
    if (why) *why = reason;
    return one;
}

bool LtFp8Gemm::supports(int64_t n, int64_t in, int64_t out, int64_t ldw, int64_t ldy, bool* f32_out,
                         const char** note) {
    if (n <= 0 || in % 128 != 0 || out % 128 != 0 || ldw % 16 != 0 || ldy % 4 != 0) return false;
    const int64_t rows = lt_rows(n);
    const Impl::Plan& p = impl_->plan(rows, in, out, ldw, rows == n ? ldy : out);
    if (f32_out) *f32_out = p.f32_out;
    if (note) *note = p.note.c_str();
    return p.ok;
}

bool LtFp8Gemm::run(const uint8_t* q, const float* sx, const void* w, int64_t ldw, const float* sw, int64_t n,
                    int64_t in, int64_t out, float* y, int64_t ldy, void* tmp, Stream s) {
    if (!supports(n, in, out, ldw, ldy)) return false;
    const int64_t rows = lt_rows(n);
    const bool direct = rows == n;
    Impl::Plan& p = impl_->plan(rows, in, out, ldw, direct ? ldy : out);
    impl_->desc_set(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof sw);
    impl_->desc_set(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sx, sizeof sx);
    const float alpha = 1.0f, beta = 0.0f;
    void* d = direct && p.f32_out ? static_cast<void*>(y) : tmp;
    const cublasStatus_t st =
        impl_->matmul(impl_->handle, p.desc, &alpha, w, p.la, q, p.lb, &beta, d, p.ld, d, p.ld, &p.algo,
                      impl_->workspace, Impl::kWorkspace, static_cast<cudaStream_t>(s));
    if (st != CUBLAS_STATUS_SUCCESS) return false;
    if (!p.f32_out) {
        launch_bf16_rows_to_f32(static_cast<const uint16_t*>(tmp), n, out, y, ldy, s);
    } else if (!direct) {
        if (cudaMemcpy2DAsync(y, size_t(ldy) * 4, tmp, size_t(out) * 4, size_t(out) * 4, size_t(n),
                              cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s)) != cudaSuccess)
            return false;
    }
    return true;
}

}  // namespace di::cuda
