// CudaBackend's declaration and the helpers shared by cuda_backend.cpp (memory, stream) and cuda_ops.cpp
// (one method per op: check, convert Args to kernel params, launch).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/cuda/cuda_allocator.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/op_variants.h"

#define DI_CUDA_OK(expr)                                                                     \
    do {                                                                                     \
        const cudaError_t e_ = (expr);                                                       \
        DI_CHECK(e_ == cudaSuccess, "CUDA error in {}: {}", #expr, cudaGetErrorString(e_)); \
    } while (0)

namespace di::ops::cuda_impl {

using cuda::Fdt;
using cuda::WeightRef;

Fdt fdt(DType t, std::string_view what);
void on_device(const TensorView& v, std::string_view what);
WeightRef weight_ref(const QWeight& w, std::string_view what);

template <class A>
void args_on_device(A& a, std::string_view op) {
    a.visit([&](const char* field, const TensorView& v, Role) { on_device(v, std::string(op) + "." + field); });
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
        }
        return s.p;
    }

private:
    struct Slot {
        void* p = nullptr;
        size_t bytes = 0;
    };
    Allocator& alloc_;
    std::array<Slot, 8> slots_{};
};

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int device);
    ~CudaBackend() override {
        cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
        for (auto& [k, t] : expert_tables_) alloc_.deallocate(t.device);
        cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
    }

    std::string_view name() const override { return "cuda"; }
    Allocator& allocator() override { return alloc_; }
    void set_scope(std::string_view s) override { scope_ = s; }

    void copy(const TensorView& dst, const TensorView& src) override {
        DI_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.nbytes() == src.nbytes(), "copy {} <- {}",
                 dst.describe(), src.describe());
        if (dst.nbytes() == 0) return;
        DI_CUDA_OK(cudaMemcpyAsync(dst.data, src.data, dst.nbytes(), cudaMemcpyDefault, stream()));
        if (dst.device == Device::kHost || src.device == Device::kHost) synchronize();
    }
    void fill_zero(const TensorView& dst) override {
        DI_CHECK(dst.is_contiguous(), "fill_zero of non-contiguous {}", dst.describe());
        on_device(dst, "fill_zero");
        DI_CUDA_OK(cudaMemsetAsync(dst.data, 0, dst.nbytes(), stream()));
    }
    void synchronize() override {
        const cudaError_t e = cudaStreamSynchronize(stream());
        DI_CHECK(e == cudaSuccess, "CUDA error (scope '{}'): {}", scope_, cudaGetErrorString(e));
    }

    void embed(const EmbedArgs& a) override;
    void add(const AddArgs& a) override;
    void swiglu(const SwigluArgs& a) override;
    void linear(const LinearArgs& a) override;
    void linears(std::span<const LinearArgs> jobs) override;
    void rms_norm(const RmsNormArgs& a) override;
    void rope(const RopeArgs& a) override;
    void compress(const CompressArgs& a) override;
    void indexer_topk(const IndexerTopkArgs& a) override;
    void attention(const AttentionArgs& a) override;
    void window_store(const WindowStoreArgs& a) override;
    void mhc_pre(const MhcPreArgs& a) override;
    void mhc_post(const MhcPostArgs& a) override;
    void hc_head(const HcHeadArgs& a) override;
    void route(const RouteArgs& a) override;
    void moe(const MoeArgs& a) override;
    std::vector<KernelVariant> kernel_variants() const override;
    void set_allow_list(const AllowList& l) override;
    int64_t dispatch_count(std::string_view op, std::string_view variant) const override;
    KernelLimits kernel_limits() const override {
        return {cuda::attention_max_head_dim(), cuda::indexer_max_topk(), cuda::mhc_max_hc()};
    }
    bool force_variant(std::string_view op, std::string_view variant) override;

private:
    cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_); }
    void launched(std::string_view op) {
        const char* err = cuda::last_launch_error();
        DI_CHECK(err == nullptr, "CUDA launch of {} failed (scope '{}'): {}", op, scope_, err);
        for (size_t i = 0; i < std::size(kOps); ++i)
            if (kOps[i] == op) return void(++launches_[i]);
    }

    struct ExpertTable {
        std::vector<WeightRef> host;
        void* device = nullptr;
        int gemv_format = -1;  // shared gemv_format() of every expert matrix, or -1
    };
    const ExpertTable& expert_table(const MoeArgs& a);
    // The linear variant for one call; `in_group`: split_rows would share its launch with other jobs.
    int choose_linear(const LinearArgs& a, const WeightRef& w, bool in_group);
    // fp8 activation blocks quantised, then cuBLASLt's block-scaled FP8 matmul (choose_linear picked it).
    void linear_lt_fp8(const LinearArgs& a, const WeightRef& w);
    // The ops with several kernels (cuda_ops.cpp lists them); the rest have one kernel each ("cuda"),
    // counted in launches_.
    OpVariants linear_v_, moe_v_, mhc_pre_v_, hc_head_v_, attention_v_;
    OpVariants* variants_of(std::string_view op);
    const OpVariants* variants_of(std::string_view op) const {
        return const_cast<CudaBackend*>(this)->variants_of(op);
    }
    // Launches per op; atomics because /metrics reads them while the engine runs (every key is set in the
    // constructor).
    static constexpr std::string_view kOps[] = {"embed",   "add",     "swiglu",  "linear",       "rms_norm",
                                                "rope",    "compress", "indexer_topk", "attention", "window_store",
                                                "mhc_pre", "mhc_post", "hc_head",      "route",     "moe"};
    std::atomic<int64_t> launches_[std::size(kOps)] = {};
    int device_;
    cuda_impl::CachingAllocator alloc_;
    DeviceScratch scratch_;
    void* stream_ = nullptr;
    std::string scope_;
    std::unordered_map<const ExpertWeights*, ExpertTable> expert_tables_;
};

}  // namespace di::ops::cuda_impl
