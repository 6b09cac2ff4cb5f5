#include "ops/cuda/lt_lib.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

namespace di::cuda {

bool LtLib::load(const char** why) {
    void* lib = nullptr;
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
    if (cudaMalloc(&workspace, kWorkspace) != cudaSuccess) return *why = "no memory for the workspace", false;
    return true;
}

LtLib* LtLib::get(const char** why) {
    static const char* reason = nullptr;
    static LtLib* one = [] {
        auto* lib = new LtLib;
        if (!lib->load(&reason)) return static_cast<LtLib*>(nullptr);
        return lib;
    }();
    if (why) *why = reason;
    return one;
}

cublasLtMatmulPreference_t LtLib::preference(bool fixed_reduction) const {
    cublasLtMatmulPreference_t pref;
    pref_create(&pref);
    size_t ws = kWorkspace;
    pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (fixed_reduction) {
        const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                                 CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
        pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes);
    }
    return pref;
}

}  // namespace di::cuda
