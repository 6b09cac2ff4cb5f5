// CudaBackend's declaration and the helpers shared by cuda_backend.cpp (memory, stream) and cuda_ops.cpp
// (one method per op: check, convert Args to kernel params, launch).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ops/cuda/cuda_allocator.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/fused_kernels.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/op_variants.h"
#include "ops/cuda/step_graphs.h"

namespace di::ops::cuda_impl {

using cuda::Fdt;
using cuda::WeightRef;

Fdt fdt(DType t, std::string_view what);
void on_device(const TensorView& v, std::string_view what);
WeightRef weight_ref(const QWeight& w, std::string_view what);

template <class A>
void args_on_device(A& a, std::string_view op) {
    a.visit(
        [&](const char* field, const TensorView& v, Role) { on_device(v, std::string(op) + "." + field); });
}
template <class A>
void device_args(const A& a, std::string_view op) {
    A c = a;
    args_on_device(c, op);
}
inline const float* f32(const TensorView& v) { return v.empty() ? nullptr : v.ptr<const float>(); }
inline float* f32m(const TensorView& v) { return v.ptr<float>(); }
inline int64_t ld(const TensorView& v) { return v.empty() ? 0 : v.stride[0]; }
inline void need_f32_rows(const TensorView& v, std::string_view what) {
    if (v.empty()) return;
    check_dtype(v, DType::kF32, what);
    DI_CHECK(v.stride[v.ndim - 1] == 1, "{}: {} needs unit last stride", what, v.describe());
}

class DeviceScratch final : public cuda::Scratch {
  public:
    explicit DeviceScratch(Allocator& a) : alloc_(a) {}
    ~DeviceScratch() override {
        for (auto& s : slots_) alloc_.deallocate(s.p);
    }
    void* get(int slot, size_t bytes) override {
        DI_CHECK(slot >= 0 && slot < int(slots_.size()), "scratch slot {}", slot);
        Slot& s = slots_[size_t(slot)];
        if (bytes > s.bytes) {  // grow only: a steady decode loop stops allocating after its first step
            alloc_.deallocate(s.p);
            s.p = alloc_.allocate(bytes);
            s.bytes = bytes;
            ++s.generation;
        }
        touched_ |= 1u << slot;
        return s.p;
    }
    // The slots used since the last call (a graph capture records them).
    uint32_t take_touched() { return std::exchange(touched_, 0u); }
    // Changes whenever a slot in `mask` is replaced.
    uint64_t generations(uint32_t mask) const {
        uint64_t h = 0;
        for (size_t i = 0; i < slots_.size(); ++i)
            if (mask & (1u << i)) h = h * 1000003u + slots_[i].generation;
        return h;
    }

  private:
    struct Slot {
        void* p = nullptr;
        size_t bytes = 0;
        uint32_t generation = 0;
    };
    Allocator& alloc_;
    std::array<Slot, cuda::kScratchSlots> slots_{};
    uint32_t touched_ = 0;
};

class CudaBackend final : public Backend {
  public:
    explicit CudaBackend(int device);
    ~CudaBackend() override {
        graphs_.reset();
        cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
        for (auto& [k, t] : expert_tables_) alloc_.deallocate(t.device), alloc_.deallocate(t.maps);
        cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
    }

    std::string_view name() const override { return "cuda"; }
    Allocator& allocator() override { return alloc_; }
    // f32 in cuBLASLt's layout (lt_scale_ld), which every fp8 kernel reads: the per-call conversion of
    // linear_lt_fp8 gone (DEEPINFER_FP8_SCALES_AT_BIND=0 keeps the checkpoint's form).
    std::optional<BoundScales> fp8_block_scales(const TensorView& scale) override;
    void set_scope(std::string_view s) override { scope_ = s; }

    void copy(const TensorView& dst, const TensorView& src) override {
        const bool host = dst.device == Device::kHost || src.device == Device::kHost;
        if (host) before_host_sync();
        if (replaying()) return;
        DI_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.nbytes() == src.nbytes(), "copy {} <- {}",
                 dst.describe(), src.describe());
        if (dst.nbytes() == 0) return;
        DI_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, dst.nbytes(), cudaMemcpyDefault, stream()));
        if (host) synchronize();
    }
    void copy_many(std::span<const CopyPair> pairs) override;
    void fill_zero(const TensorView& dst) override {
        if (replaying()) return;
        DI_CHECK(dst.is_contiguous(), "fill_zero of non-contiguous {}", dst.describe());
        on_device(dst, "fill_zero");
        DI_CUDA_CHECK(cudaMemsetAsync(dst.data, 0, dst.nbytes(), stream()));
    }
    void bind_thread() override { DI_CUDA_CHECK(cudaSetDevice(device_)); }
    void synchronize() override {
        before_host_sync();
        const cudaError_t e = cudaStreamSynchronize(stream());
        DI_CHECK(e == cudaSuccess, "CUDA error (scope '{}'): {}", scope_, cudaGetErrorString(e));
    }

    void embed(const EmbedArgs& a) override;
    void cast(const CastArgs& a) override;
    void add(const AddArgs& a) override;
    void swiglu(const SwigluArgs& a) override;
    void linear(const LinearArgs& a) override;
    void linears(std::span<const LinearArgs> jobs) override;
    void attentions(std::span<const AttentionArgs> jobs) override;
    void window_stores(std::span<const WindowStoreArgs> jobs) override;
    void attentions_stored(std::span<const AttentionArgs> jobs, std::span<const WindowStoreArgs> stores,
                           const RopeArgs& out_rope, const QueryPrep* q_prep,
                           const ActQuantArgs* out_quant) override;
    bool fuses_attention_tail(std::span<const int64_t> chunk_queries, int64_t n_heads, int64_t head_dim,
                              bool f16) const override;
    void rms_norm(const RmsNormArgs& a) override;
    void rope(const RopeArgs& a) override;
    void compress(const CompressArgs& a) override;
    void compresses(std::span<const CompressArgs> jobs) override;
    void indexer_topk(const IndexerTopkArgs& a) override;
    void indexer_topks(std::span<const IndexerTopkArgs> jobs) override;
    void attention(const AttentionArgs& a) override;
    void window_store(const WindowStoreArgs& a) override;
    void mhc_pre(const MhcPreArgs& a) override;
    void mhc_post(const MhcPostArgs& a) override;
    void hc_head(const HcHeadArgs& a) override;
    void route(const RouteArgs& a) override;
    void moe(const MoeArgs& a) override;
    void argmax(const ArgmaxArgs& a) override;
    void act_quant(const ActQuantArgs& a) override;
    void top_candidates(const TopCandidatesArgs& a) override;
    // The kernel's GPU tests (cuda_top_candidates_test.cpp, cuda_engine_candidates_test.cpp) pass on the
    // H200.
    bool candidates_on_device() const override { return true; }
    bool bf16_streams() const override;
    bool bf16_queries() const override;
    void moe_combine_pass(const MoeArgs& a);  // MoeArgs::Pass::kCombine
    // cuda_fused_ops.cpp
    void rms_norm_rope(const RmsNormArgs& norm, const RopeArgs& r) override;
    void rms_norm_ropes(std::span<const RmsNormArgs> norms, std::span<const RopeArgs> ropes) override;
    void mhc_pre_norm(const MhcPreArgs& pre, const RmsNormArgs& norm) override;
    void hc_head_norm(const HcHeadArgs& head, const RmsNormArgs& norm) override;
    void add_mhc_post(const AddArgs& sum, const MhcPostArgs& post) override;
    std::vector<KernelVariant> kernel_variants() const override;
    void set_allow_list(const AllowList& l) override;
    int64_t dispatch_count(std::string_view op, std::string_view variant) const override;
    KernelLimits kernel_limits() const override {
        return {cuda::attention_max_head_dim(), cuda::indexer_max_topk(), cuda::mhc_max_hc()};
    }
    bool force_variant(std::string_view op, std::string_view variant) override;
    void segment_begin(std::span<const int64_t> key) override;
    void segment_end() override;
    void set_graphs(bool on) override { graphs_->set_enabled(on); }

  private:
    cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_); }
    // Inside a replayed segment every op returns at once: the graph holds its launches.
    bool replaying() const { return graphs_ && graphs_->mode() == StepGraphs::Mode::kReplay; }
    // Before the host waits on the stream: a capture in progress is launched as it stands.
    void before_host_sync() {
        if (graphs_) graphs_->interrupt();
    }
    // Every dispatch counter (launches_, then each OpVariants'), for a graph's replay to add what it ran.
    std::vector<int64_t> counters() const;
    void add_counters(const std::vector<int64_t>& delta);
    void launched(std::string_view op) {
        const char* err = cuda::last_launch_error();
        DI_CHECK(err == nullptr, "CUDA launch of {} failed (scope '{}'): {}", op, scope_, err);
        for (size_t i = 0; i < std::size(kOps); ++i)
            if (kOps[i] == op) return void(++launches_[i]);
    }

    struct ExpertTable {
        std::vector<WeightRef> host;
        void* device = nullptr;
        int gemv_format = -1;     // shared gemv_format() of every expert matrix, or -1
        bool mma_ok = false;      // moe_mma takes it (MoeParams::mma_ok)
        bool scales_4b = false;   // MoeParams::scales_4b
        bool scales_16b = false;  // MoeParams::scales_16b
        bool e4m3_ok = false;     // MoeParams::e4m3_ok
        bool e4m3_rows = false;   // MoeParams::e4m3_rows
        void* maps = nullptr;     // every matrix's TMA map where each has one (MoeParams::maps), else null
    };
    const ExpertTable& expert_table(const MoeArgs& a);
    void expert_maps(ExpertTable& t);
    // The linear variant for one call; `in_group`: split_rows would share its launch with other jobs.
    int choose_linear(const LinearArgs& a, const WeightRef& w, bool in_group);
    std::pair<cuda::AttentionParams, int> attention_call(const AttentionArgs& a);
    cuda::CompressParams compress_params(const CompressArgs& a);
    std::pair<cuda::IndexerParams, int> indexer_call(const IndexerTopkArgs& a);
    // linear() after its checks: variant v of choose_linear on f32 x.
    void linear_chosen(const LinearArgs& a, const WeightRef& w, int v);
    // linear() on pre-quantised x (LinearArgs' e4m3 codes and scales).
    void linear_quantised(const LinearArgs& a, const WeightRef& w);
    // A bf16 y: cuBLASLt's FP8 matmul writes it where the dispatch picks that (f32 x); otherwise the f32
    // result goes to scratch (slot 17), then cast into y.
    void linear_bf16_out(const LinearArgs& a, const WeightRef& w);
    // linears(): job i and the later cublaslt_bf16x3 jobs (var) on the same x as one split, marked done;
    // false (nothing run) where it is alone or the sharing is off (cuda::bf16x3_share).
    bool bf16x3_shared(std::span<const LinearArgs> jobs, std::span<const WeightRef> w,
                       std::span<const int> var, std::vector<bool>& done, size_t i);
    // One linear on f32 x by a variant other than cublaslt_fp8 (mma needs the scratch).
    void run_linear(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n,
                    cuda::LinearVariant v);
    // An fp8 GEMM's input as cuBLASLt takes it: e4m3 rows (row stride ldq) and their K-block-major scales
    // (lt_rows(n) a block).
    struct LtInput {
        const float* x = nullptr;  // the first f32 column it holds
        const uint8_t* q = nullptr;
        const float* sx = nullptr;
        int64_t ldq = 0, rows = 0;
        // from f32 column `col` of the same rows on (128-aligned to x)
        LtInput from(const float* col) const {
            const int64_t c = col - x;
            return {col, q + c, sx + c / 128 * rows, ldq, rows};
        }
    };
    // x [n, width] quantised per 128 as the native quantiser does, into scratch slot 14 (pad: on
    // lt_rows(n) rows, the rows past n zero, as cuBLASLt needs them).
    LtInput lt_quantise(const float* x, int64_t ldx, int64_t n, int64_t width, bool pad = true);
    // lt: the jobs that read the quantised copy; fp8mma: those of them that fp8_mma runs.
    std::optional<LtInput> lt_shared_input(std::span<const LinearArgs> jobs, std::span<const WeightRef> w,
                                           const std::vector<bool>& lt, const std::vector<bool>& fp8mma);
    // cuBLASLt's block-scaled FP8 matmul (choose_linear picked it) on `in`, or on a.x quantised here.
    void linear_lt_fp8(const LinearArgs& a, const WeightRef& w, const LtInput* in = nullptr);
    // fp8_mma (choose_linear picked it) on `in`, or on a.x quantised here (n rows, no padding).
    void linear_fp8mma(const LinearArgs& a, const WeightRef& w, const LtInput* in = nullptr);
    // The ops with several kernels (cuda_ops.cpp lists them); the rest have one kernel each ("cuda"),
    // counted in launches_.
    OpVariants linear_v_, moe_v_, mhc_pre_v_, hc_head_v_, attention_v_, indexer_v_;
    // The fused pairs: "fused" (one launch) or "separate" (the two ops' own dispatch), the fallback.
    OpVariants norm_rope_v_, pre_norm_v_, head_norm_v_, add_post_v_;
    std::array<OpVariants*, 10> all_variants() {
        return {&linear_v_,  &moe_v_,       &mhc_pre_v_,  &hc_head_v_,   &attention_v_,
                &indexer_v_, &norm_rope_v_, &pre_norm_v_, &head_norm_v_, &add_post_v_};
    }
    std::array<const OpVariants*, 10> all_variants() const {
        auto v = const_cast<CudaBackend*>(this)->all_variants();
        std::array<const OpVariants*, 10> c{};
        for (size_t i = 0; i < v.size(); ++i) c[i] = v[i];
        return c;
    }
    // The checked MhcParams of an mhc_pre / hc_head call; the variant of mhc_pre_v_ / hc_head_v_ it takes
    // (counted), and whether that would be split_k (not counted).
    cuda::MhcParams mhc_pre_params(const MhcPreArgs& a);
    cuda::MhcParams hc_head_params(const HcHeadArgs& a);
    int mhc_variant(OpVariants& ov, const cuda::MhcParams& p);
    bool mhc_takes_split(const OpVariants& ov, const cuda::MhcParams& p) const;
    bool fused_mhc_norm(OpVariants& pair, OpVariants& mhc, const cuda::MhcParams& p, const TensorView& out,
                        const RmsNormArgs& norm, const char* mhc_op);  // cuda_fused_ops.cpp
    std::optional<cuda::NormRopeJob> norm_rope_job(const RmsNormArgs& norm, const RopeArgs& r);  // same
    OpVariants* variants_of(std::string_view op);
    const OpVariants* variants_of(std::string_view op) const {
        return const_cast<CudaBackend*>(this)->variants_of(op);
    }
    // Launches per op; atomics because /metrics reads them while the engine runs (every key is set in the
    // constructor).
    static constexpr std::string_view kOps[] = {
        "embed",    "cast",     "add",          "swiglu",    "linear",       "rms_norm",
        "rope",     "compress", "indexer_topk", "attention", "window_store", "mhc_pre",
        "mhc_post", "hc_head",  "route",        "moe",       "argmax",       "act_quant"};
    std::atomic<int64_t> launches_[std::size(kOps)] = {};
    int device_;
    cuda_impl::CachingAllocator alloc_;
    DeviceScratch scratch_;
    void* stream_ = nullptr;
    std::string scope_;
    std::unordered_map<const ExpertWeights*, ExpertTable> expert_tables_;
    uint64_t variant_epoch_ = 0;  // bumped when the allow-list or a forced variant changes
    std::unique_ptr<StepGraphs> graphs_;
    std::vector<int64_t> counters_at_begin_;
};

}  // namespace di::ops::cuda_impl
