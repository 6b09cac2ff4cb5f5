// The optimised CPU backend: float SIMD kernels spread over a thread pool, checked against ref
// (tests/ops). Ops without a verified fast kernel run on an owned reference backend (kCpuFastOps is the
// allow-list: an op runs fast only when it is listed, and it is listed only once its op tests pass).
//
// Determinism and batch invariance: every output element is computed by one thread with a summation order
// fixed by the op's shape parameters that do not involve the number of rows/tokens n (dot products use 16
// float lanes, or 8 double lanes in mhc, over the reduced dimension in index order, folded by a fixed tree;
// the tail goes into lanes 0..r-1; attention sums keys in ref's key order; moe combines slots in slot order).
// So a row's bits never depend on the other rows in the batch, on its position in the batch, or on the
// thread count. The module is built with -ffp-contract=off and dequantisation is exact, so the AVX-512 /
// AVX2 / baseline variants of a kernel (picked at load time) give the same bits too.
// Accuracy vs ref (tests/ops states a derived bound per case): linear/moe/attention sum in float, error
// <= (ceil(len/16) + 6) 2^-24 sum|terms| per dot; moe SwiGLU outputs and attention weights below FLT_MIN
// are flushed to 0; indexer_topk picks equal ref's exactly (near-ties are rescored in ref's double
// arithmetic); mhc_pre / hc_head keep double sums (within 2 float ulp of ref).
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <iterator>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "ops/backend.h"

namespace di::ops {

// Ops with a fast kernel (each has a case table in tests/ops/); every other op delegates to ref.
inline constexpr std::string_view kCpuFastOps[] = {"linear",  "moe",      "attention", "indexer_topk",
                                                   "mhc_pre", "hc_head",  "mhc_post",  "compress",
                                                   "swiglu",  "rms_norm", "rope"};

constexpr bool cpu_op_is_fast(std::string_view op) {
    for (std::string_view f : kCpuFastOps)
        if (f == op) return true;
    return false;
}

constexpr int cpu_fast_index(std::string_view op) {
    for (int i = 0; i < int(std::size(kCpuFastOps)); ++i)
        if (kCpuFastOps[i] == op) return i;
    return -1;
}

// Variant names: every fast op has its SIMD kernel and the reference code (the fallback).
inline constexpr std::string_view kCpuSimd = "cpu_simd", kCpuRef = "ref";

namespace cpu {
// Rows prepared for the AMX tiles: their bf16 planes (1: values exact in bf16; 3: f32 values split into
// three) and the exponent fields of the planes' nonzero values (lo > hi: none).
struct AmxX {
    int lo = 255, hi = 0;
    int planes = 1;
    void merge(const AmxX& o) { lo = o.lo < lo ? o.lo : lo, hi = o.hi > hi ? o.hi : hi; }
};
}  // namespace cpu

// Per-thread scratch memory, grown on demand and kept (no allocation once warm).
struct CpuScratch {
    std::vector<float> w;       // dequantised weight rows
    std::vector<float> acc;     // tile results
    std::vector<float> rows;    // an AMX task's results (moe)
    std::vector<double> post;   // mhc_post's column sums
    std::vector<float> hc_in;   // a token's bf16 streams as f32 (mhc ops)
    std::vector<float> hc_out;  // mhc_post's f32 results before their rounding to bf16
    // indexer_topk
    std::vector<float> wt, score;
    std::vector<const float*> qrows;
    std::vector<int32_t> order;
    std::vector<std::pair<double, int32_t>> exact;
};

class CpuBackend final : public Backend {
  public:
    // n_threads <= 0: ThreadPool::default_threads() (DEEPINFER_THREADS or hardware_concurrency).
    explicit CpuBackend(int n_threads = 0);
    ~CpuBackend() override;

    std::string_view name() const override { return "cpu"; }
    std::string hardware() const override;
    bool uses_row_groups() const override { return true; }
    int n_threads() const { return pool_.size(); }
    Allocator& allocator() override { return host_allocator(); }
    void copy(const TensorView& dst, const TensorView& src) override { ref_->copy(dst, src); }
    void fill_zero(const TensorView& dst) override { ref_->fill_zero(dst); }

    void embed(const EmbedArgs& a) override { ref_->embed(a); }
    void add(const AddArgs& a) override { ref_->add(a); }
    void swiglu(const SwigluArgs& a) override;  // cpu_rowwise.cpp
    void linear(const LinearArgs& a) override;
    void rms_norm(const RmsNormArgs& a) override;   // cpu_rowwise.cpp
    void rope(const RopeArgs& a) override;          // cpu_rowwise.cpp
    void compress(const CompressArgs& a) override;  // cpu_compress.cpp
    void indexer_topk(const IndexerTopkArgs& a) override;
    void attention(const AttentionArgs& a) override;
    void window_store(const WindowStoreArgs& a) override { ref_->window_store(a); }
    void mhc_pre(const MhcPreArgs& a) override;
    void mhc_post(const MhcPostArgs& a) override;
    void hc_head(const HcHeadArgs& a) override;
    void route(const RouteArgs& a) override { ref_->route(a); }
    void moe(const MoeArgs& a) override;

    std::vector<KernelVariant> kernel_variants() const override;
    void set_allow_list(const AllowList& l) override;
    int64_t dispatch_count(std::string_view op, std::string_view variant) const override;
    bool force_variant(std::string_view op, std::string_view variant) override;

  private:
    TensorView quantise_rows(const TensorView& x);  // ActQuant::kFp8Block128's rows into xq_
    // f(r0, r1) for blocks of rows [0, n) over the pool (at once when n * work_per_row is small).
    void over_rows(int64_t n, int64_t work_per_row, const std::function<void(int64_t, int64_t)>& f);
    void linear_amx(const LinearArgs& a);    // native FP8 on the AMX tiles, x quantised
    void linear_tiles(const LinearArgs& a);  // the AVX-512 / AVX2 / baseline tiles
    void moe_by_row_size(const MoeArgs& a, int64_t min_tokens);
    void moe_rows(const MoeArgs& a, bool amx);            // moe's phases 1-2 (and 3 unless a pass)
    void combine(const MoeArgs& a, const float* d_rows);  // moe's phase 3 (cpu_moe.cpp)
    // Whether fast op `i` (cpu_fast_index) runs its SIMD kernel this call, counting the dispatch.
    bool take_fast(int i) {
        FastOp& f = fast_[size_t(i)];
        const bool simd = f.forced >= 0 ? f.forced == 1 : f.allowed;
        (simd ? f.n_simd : f.n_ref).fetch_add(1, std::memory_order_relaxed);
        return simd;
    }
    struct FastOp {
        bool allowed = true;  // by the active allow-list (the built-in one allows every tested kernel)
        int forced = -1;      // -1: dispatch by the list; 0: ref; 1: SIMD
        std::atomic<int64_t> n_simd{0}, n_ref{0};  // read by /metrics while the engine runs
    };
    std::array<FastOp, std::size(kCpuFastOps)> fast_{};

    void collect_keys(const AttentionArgs& a);  // fills att_keys_ / att_off_
    void indexer_query(const IndexerTopkArgs& a, int64_t t, double kmax, CpuScratch& s);

    ThreadPool pool_;
    std::unique_ptr<Backend> ref_;
    std::vector<CpuScratch> scratch_;  // one per pool thread
    std::vector<const float*> xrows_;  // input row pointers of the current op
    std::vector<float> xq_;            // fp8-block activations, dequantised (ActQuant::kFp8Block128)
    std::vector<uint16_t> xbf_;        // the same as bf16 for the native FP8 kernel (cpu_native_fp8.cpp)
    std::vector<const uint16_t*> xbf_rows_;
    // moe: token-slot pairs grouped by expert, and the intermediate activations.
    struct MoeTask {
        int32_t expert;
        int64_t o0, o1;  // weight rows
    };
    std::vector<int64_t> moe_offsets_;  // [n_experts + 1] into moe_pairs_
    std::vector<int64_t> moe_cursor_;   // [n_experts] fill position while grouping
    std::vector<int64_t> moe_pairs_;    // token * k + slot, grouped by expert, token order within
    std::vector<MoeTask> moe_tasks_;
    std::vector<const float*> moe_hrows_;
    std::vector<float> moe_xq_;                // the tokens' quantised rows (MoeArgs::act)
    std::vector<uint16_t> moe_xbf_, moe_hbf_;  // those rows and h's as bf16 for the native fp4 kernel
    std::vector<const uint16_t*> moe_xbf_rows_, moe_hbf_rows_;
    std::vector<uint16_t> moe_xv_;  // x's or h's rows for the AMX tiles, per expert (cpu_amx.cpp)
    std::vector<cpu::AmxX> moe_xr_;
    std::vector<cpu::AmxX> amx_ranges_;  // a linear's token groups' exponent ranges (cpu_amx.cpp)
    std::vector<float> moe_h_, moe_d_;
    // attention: visible key rows of query t are att_keys_[att_off_[t] .. att_off_[t + 1]).
    std::vector<const float*> att_keys_;
    std::vector<int64_t> att_off_;
    std::vector<uint8_t> att_seen_;  // [n * k, moe_dim] swiglu output, [n * k, hidden_dim] expert output
};

std::unique_ptr<Backend> make_cpu_backend(int n_threads = 0);

}  // namespace di::ops
