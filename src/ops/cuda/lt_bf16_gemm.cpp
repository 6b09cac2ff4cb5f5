// The bf16x3 GEMM of bf16_gemm.h on cuBLASLt (lt_lib.h). Layouts as for the FP8 GEMM (fp8_gemm.h): A = W
// [out, in] bf16 as K x O column-major with op T; B = the pieces [3 rows, in] as K x 3rows with op N; D
// [3 rows, out] f32 as O x 3rows. Only algorithms whose split-K partials stay out of the output are taken,
// so a shape gives the same bits on every run.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include "ops/cuda/bf16_gemm.h"
#include "ops/cuda/env_switch.h"
#include "ops/cuda/lt_lib.h"

namespace di::cuda {
namespace {

constexpr size_t kTmpCap = size_t(256) << 20;
std::atomic<bool> share{env_switch("DEEPINFER_BF16X3_SHARE", true)};
size_t up256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

void set_bf16x3_share(bool on) { share = on; }
bool bf16x3_share() { return share; }

struct LtBf16x3Gemm::Impl {
    LtLib* lt = nullptr;
    struct Plan {
        bool ok = false;
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
        cublasLtMatmulAlgo_t algo{};
    };
    using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;  // piece rows, in, out, ldw
    std::map<Key, Plan> plans;
    std::mutex mu;

    Plan make_plan(int64_t rows, int64_t in, int64_t out, int64_t ldw) {
        Plan p;
        lt->desc_create(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        lt->desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
        lt->desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
        lt->layout_create(&p.la, CUDA_R_16BF, uint64_t(in), uint64_t(out), ldw);
        lt->layout_create(&p.lb, CUDA_R_16BF, uint64_t(in), uint64_t(rows), in);
        lt->layout_create(&p.ld, CUDA_R_32F, uint64_t(out), uint64_t(rows), out);
        cublasLtMatmulPreference_t pref = lt->preference(true);
        cublasLtMatmulHeuristicResult_t res{};
        int found = 0;
        const cublasStatus_t st =
            lt->heuristic(lt->handle, p.desc, p.la, p.lb, p.ld, p.ld, pref, 1, &res, &found);
        lt->pref_destroy(pref);
        if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
            p.ok = true, p.algo = res.algo;
            return p;
        }
        lt->desc_destroy(p.desc), lt->layout_destroy(p.la), lt->layout_destroy(p.lb),
            lt->layout_destroy(p.ld);
        return Plan{};
    }

    Plan& plan(int64_t rows, int64_t in, int64_t out, int64_t ldw) {
        std::lock_guard lk(mu);
        const Key k{rows, in, out, ldw};
        auto it = plans.find(k);
        if (it == plans.end()) it = plans.emplace(k, make_plan(rows, in, out, ldw)).first;
        return it->second;
    }
};

LtBf16x3Gemm* LtBf16x3Gemm::instance(const char** why) {
    static const char* reason = nullptr;
    static LtBf16x3Gemm* one = [] {
        LtLib* lt = LtLib::get(&reason);
        if (!lt) return static_cast<LtBf16x3Gemm*>(nullptr);
        auto* impl = new Impl;
        impl->lt = lt;
        return new LtBf16x3Gemm(impl);
    }();
    if (why) *why = reason;
    return one;
}

int64_t LtBf16x3Gemm::chunk_rows(int64_t out) {
    return std::max<int64_t>(1, int64_t(kTmpCap / (3 * 4 * size_t(std::max<int64_t>(out, 1)))));
}

size_t LtBf16x3Gemm::tmp_bytes(int64_t n, int64_t in, int64_t out) {
    const size_t rows = size_t(std::min(n, chunk_rows(out)));
    return up256(3 * rows * size_t(in) * 2) + 3 * rows * size_t(out) * 4;
}

bool LtBf16x3Gemm::supports(int64_t n, int64_t in, int64_t out, const void* w, int64_t ldw) {
    if (n <= 0 || in % 8 != 0 || out % 4 != 0 || ldw % 8 != 0 || reinterpret_cast<uintptr_t>(w) % 256 != 0)
        return false;
    const int64_t chunk = chunk_rows(out), last = n % chunk;
    return impl_->plan(3 * std::min(n, chunk), in, out, ldw).ok &&
           (n <= chunk || last == 0 || impl_->plan(3 * last, in, out, ldw).ok);
}

namespace {
int64_t max_out(const LtBf16x3Gemm::Out* outs, size_t count) {
    int64_t m = 1;
    for (size_t i = 0; i < count; ++i) m = std::max(m, outs[i].out);
    return m;
}
}  // namespace

size_t LtBf16x3Gemm::tmp_bytes(int64_t n, int64_t in, const Out* outs, size_t count) {
    return tmp_bytes(n, in, max_out(outs, count));
}

bool LtBf16x3Gemm::supports(int64_t n, int64_t in, const Out* outs, size_t count) {
    if (n <= 0 || in % 8 != 0) return false;
    const int64_t chunk = chunk_rows(max_out(outs, count)), last = n % chunk;
    for (size_t i = 0; i < count; ++i) {
        const Out& o = outs[i];
        if (o.out % 4 != 0 || o.ldw % 8 != 0 || reinterpret_cast<uintptr_t>(o.w) % 256 != 0) return false;
        if (!impl_->plan(3 * std::min(n, chunk), in, o.out, o.ldw).ok ||
            (n > chunk && last != 0 && !impl_->plan(3 * last, in, o.out, o.ldw).ok))
            return false;
    }
    return true;
}

bool LtBf16x3Gemm::run(const float* x, int64_t ldx, const void* w, int64_t ldw, int64_t n, int64_t in,
                       int64_t out, float* y, int64_t ldy, void* tmp, Stream s) {
    const Out one[] = {{.w = w, .ldw = ldw, .out = out, .y = y, .ldy = ldy}};
    return run(x, ldx, n, in, one, 1, tmp, s);
}

bool LtBf16x3Gemm::run(const float* x, int64_t ldx, int64_t n, int64_t in, const Out* outs, size_t count,
                       void* tmp, Stream s) {
    if (count == 0 || !supports(n, in, outs, count)) return false;
    LtLib& lt = *impl_->lt;
    const int64_t chunk = chunk_rows(max_out(outs, count));
    auto* pieces = static_cast<uint16_t*>(tmp);
    auto* d = reinterpret_cast<float*>(static_cast<uint8_t*>(tmp) +
                                       up256(3 * size_t(std::min(n, chunk)) * size_t(in) * 2));
    const float alpha = 1.0f, beta = 0.0f;
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
        const int64_t rows = std::min(chunk, n - r0);
        launch_bf16x3_split(x + r0 * ldx, ldx, rows, in, pieces, s);
        for (size_t i = 0; i < count; ++i) {
            const Out& o = outs[i];
            Impl::Plan& p = impl_->plan(3 * rows, in, o.out, o.ldw);
            if (lt.matmul(lt.handle, p.desc, &alpha, o.w, p.la, pieces, p.lb, &beta, d, p.ld, d, p.ld,
                          &p.algo, lt.workspace, LtLib::kWorkspace,
                          static_cast<cudaStream_t>(s)) != CUBLAS_STATUS_SUCCESS)
                return false;
            launch_bf16x3_sum(d, rows, o.out, o.y + r0 * o.ldy, o.ldy, s);
        }
    }
    return true;
}

}  // namespace di::cuda
