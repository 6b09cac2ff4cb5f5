// cuBLASLt loaded with dlopen, once per process (the toolkit ships it as a shared library only, and a binary
// that needs none runs wherever the driver does): the entry points deepinfer calls, one handle and one
// workspace, shared by the GEMMs built on it (fp8_gemm.h, bf16_gemm.h; all run on the backend's stream, one
// after another).
#pragma once

#include <cublasLt.h>

#include <cstddef>

namespace di::cuda {

struct LtLib {
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

    // nullptr when libcublasLt cannot be loaded; `why` then says why.
    static LtLib* get(const char** why = nullptr);

    // A preference for at most kWorkspace bytes and, with `fixed_reduction`, split-K partials kept out of the
    // output (the same bits on every run). The caller destroys it.
    cublasLtMatmulPreference_t preference(bool fixed_reduction) const;

  private:
    bool load(const char** why);
};

}  // namespace di::cuda
