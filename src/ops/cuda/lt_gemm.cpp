// cuBLASLt's block-scaled FP8 matmul (cuBLASLt loaded at run time: lt_lib.h). Layouts (measured on the H200,
// see docs/kernels.md): A = W [out, in] as K x O column-major with op T and BLK128x128 f32 scales
// [out/128][in/128]; B = the activations [n, in] as K x N with op N and VEC128 f32 scales [in/128][n]; D [n,
// out] as O x N.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/lt_lib.h"

namespace di::cuda {

struct LtFp8Gemm::Impl {
    LtLib* lt = nullptr;

    // One plan per shape: the descriptors and the algorithm the heuristic chose (or none).
    struct Plan {
        bool ok = false, f32_out = false;
        std::string note;  // the heuristic's answers, for reports
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
        cublasLtMatmulAlgo_t algo{};
    };
    using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           bool>;  // n, in, out, ldw, ldy, ldq, bf16 y
    std::map<Key, Plan> plans;
    std::mutex mu;

    // A plan writing f32 if cuBLASLt has one for the shape, else bf16, else none (bf16_y: bf16 only, with
    // y's row stride); each with split-K partials kept out of the output first (the same bits on every run),
    // then with any reduction. `note` records what the heuristic answered to each try.
    Plan make_plan(int64_t n, int64_t in, int64_t out, int64_t ldw, int64_t ldy, int64_t ldq, bool bf16_y) {
        Plan none;
        for (const bool f32 : {true, false})
            for (const bool no_inplace : {true, false}) {
                if (f32 && bf16_y) continue;
                Plan p;
                lt->desc_create(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
                const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
                lt->desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
                lt->desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
                const cublasLtMatmulMatrixScale_t ma = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                                  mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
                lt->desc_set(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma);
                lt->desc_set(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb);
                // The heuristic wants device scale pointers; run() sets the real ones before each matmul.
                const void* any = lt->workspace;
                lt->desc_set(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &any, sizeof any);
                lt->desc_set(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &any, sizeof any);
                lt->layout_create(&p.la, CUDA_R_8F_E4M3, uint64_t(in), uint64_t(out), ldw);
                lt->layout_create(&p.lb, CUDA_R_8F_E4M3, uint64_t(in), uint64_t(n), ldq);
                lt->layout_create(&p.ld, f32 ? CUDA_R_32F : CUDA_R_16BF, uint64_t(out), uint64_t(n),
                                  f32 || bf16_y ? ldy : out);
                cublasLtMatmulPreference_t pref = lt->preference(no_inplace);
                cublasLtMatmulHeuristicResult_t res{};
                int found = 0;
                const cublasStatus_t st =
                    lt->heuristic(lt->handle, p.desc, p.la, p.lb, p.ld, p.ld, pref, 1, &res, &found);
                lt->pref_destroy(pref);
                none.note += std::string(none.note.empty() ? "" : "; ") + (f32 ? "f32" : "bf16") + " out" +
                             (no_inplace ? "" : " any reduction") + ": status " + std::to_string(int(st)) +
                             ", " + std::to_string(found) + " found";
                if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
                    p.ok = true, p.f32_out = f32, p.algo = res.algo, p.note = none.note;
                    return p;
                }
                lt->desc_destroy(p.desc), lt->layout_destroy(p.la), lt->layout_destroy(p.lb),
                    lt->layout_destroy(p.ld);
            }
        return none;
    }

    // What every shape needs (ldq already defaulted): ldy a multiple of y_unit elements (16 bytes).
    static bool shape_ok(int64_t n, int64_t in, int64_t out, int64_t ldw, int64_t ldy, int64_t ldq,
                         int64_t y_unit) {
        return n > 0 && in % 128 == 0 && out % 128 == 0 && ldw % 16 == 0 && ldy % y_unit == 0 &&
               ldq % 16 == 0 && ldq >= in;
    }

    // The plan's matmul into d with this call's scale pointers.
    bool matmul(Plan& p, const uint8_t* q, const float* sx, const void* w, const float* sw, void* d,
                Stream s) {
        lt->desc_set(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof sw);
        lt->desc_set(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sx, sizeof sx);
        const float alpha = 1.0f, beta = 0.0f;
        return lt->matmul(lt->handle, p.desc, &alpha, w, p.la, q, p.lb, &beta, d, p.ld, d, p.ld, &p.algo,
                          lt->workspace, LtLib::kWorkspace,
                          static_cast<cudaStream_t>(s)) == CUBLAS_STATUS_SUCCESS;
    }

    Plan& plan(int64_t n, int64_t in, int64_t out, int64_t ldw, int64_t ldy, int64_t ldq,
               bool bf16_y = false) {
        std::lock_guard lk(mu);
        const Key k{n, in, out, ldw, ldy, ldq, bf16_y};
        auto it = plans.find(k);
        if (it == plans.end()) it = plans.emplace(k, make_plan(n, in, out, ldw, ldy, ldq, bf16_y)).first;
        return it->second;
    }
};

LtFp8Gemm* LtFp8Gemm::instance(const char** why) {
    static const char* reason = nullptr;
    static LtFp8Gemm* one = [] {
        LtLib* lt = LtLib::get(&reason);
        if (!lt) return static_cast<LtFp8Gemm*>(nullptr);
        auto* impl = new Impl;
        impl->lt = lt;
        return new LtFp8Gemm(impl);
    }();
    if (why) *why = reason;
    return one;
}

bool LtFp8Gemm::supports_bf16(int64_t n, int64_t in, int64_t out, int64_t ldw, int64_t ldy, int64_t ldq) {
    if (ldq == 0) ldq = in;
    if (!Impl::shape_ok(n, in, out, ldw, ldy, ldq, 8)) return false;
    const int64_t rows = lt_rows(n);
    return impl_->plan(rows, in, out, ldw, rows == n ? ldy : out, ldq, true).ok;
}

bool LtFp8Gemm::run_bf16(const uint8_t* q, const float* sx, const void* w, int64_t ldw, const float* sw,
                         int64_t n, int64_t in, int64_t out, uint16_t* y, int64_t ldy, void* tmp, Stream s,
                         int64_t ldq) {
    if (ldq == 0) ldq = in;
    if (!supports_bf16(n, in, out, ldw, ldy, ldq)) return false;
    const int64_t rows = lt_rows(n);
    const bool direct = rows == n;
    Impl::Plan& p = impl_->plan(rows, in, out, ldw, direct ? ldy : out, ldq, true);
    if (!impl_->matmul(p, q, sx, w, sw, direct ? static_cast<void*>(y) : tmp, s)) return false;
    return direct || cudaMemcpy2DAsync(y, size_t(ldy) * 2, tmp, size_t(out) * 2, size_t(out) * 2, size_t(n),
                                       cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s)) == cudaSuccess;
}

bool LtFp8Gemm::supports(int64_t n, int64_t in, int64_t out, int64_t ldw, int64_t ldy, bool* f32_out,
                         const char** note, int64_t ldq) {
    if (ldq == 0) ldq = in;
    if (!Impl::shape_ok(n, in, out, ldw, ldy, ldq, 4)) return false;
    const int64_t rows = lt_rows(n);
    const Impl::Plan& p = impl_->plan(rows, in, out, ldw, rows == n ? ldy : out, ldq);
    if (f32_out) *f32_out = p.f32_out;
    if (note) *note = p.note.c_str();
    return p.ok;
}

bool LtFp8Gemm::run(const uint8_t* q, const float* sx, const void* w, int64_t ldw, const float* sw, int64_t n,
                    int64_t in, int64_t out, float* y, int64_t ldy, void* tmp, Stream s, int64_t ldq) {
    if (ldq == 0) ldq = in;
    if (!supports(n, in, out, ldw, ldy, nullptr, nullptr, ldq)) return false;
    const int64_t rows = lt_rows(n);
    const bool direct = rows == n;
    Impl::Plan& p = impl_->plan(rows, in, out, ldw, direct ? ldy : out, ldq);
    if (!impl_->matmul(p, q, sx, w, sw, direct && p.f32_out ? static_cast<void*>(y) : tmp, s)) return false;
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
