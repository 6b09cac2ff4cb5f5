// CudaBackend's kernel-variant bookkeeping: the variant list, the allow-list, forced variants, dispatch
// counts, and the graph segments that replay what they counted.
#include "ops/cuda/cuda_backend_impl.h"

namespace di::ops::cuda_impl {

constexpr std::string_view kSingleOps[] = {"embed", "cast",     "add",      "swiglu", "rms_norm",
                                           "rope",  "compress", "mhc_post", "route",  "window_store"};

std::vector<KernelVariant> CudaBackend::kernel_variants() const {
    std::vector<KernelVariant> v;
    for (const OpVariants* o : all_variants()) v.insert(v.end(), o->variants().begin(), o->variants().end());
    for (std::string_view op : kSingleOps)
        v.push_back({std::string(op), "cuda", "any shape (tests/gpu)", true});
    return v;
}

OpVariants* CudaBackend::variants_of(std::string_view op) {
    for (OpVariants* o : all_variants())
        if (o->op() == op) return o;
    return nullptr;
}

void CudaBackend::set_allow_list(const AllowList& l) {
    ++variant_epoch_;
    for (OpVariants* o : all_variants()) o->allow(l);
}

int64_t CudaBackend::dispatch_count(std::string_view op, std::string_view variant) const {
    if (op == "graph") {  // segments: eager (first sighting or not capturable), capture, replay, interrupted
        if (variant == "eager") return graphs_->eager;
        if (variant == "capture") return graphs_->captures;
        if (variant == "replay") return graphs_->replays;
        if (variant == "interrupted") return graphs_->interrupted;
        return 0;
    }
    if (const OpVariants* o = variants_of(op)) return std::max<int64_t>(o->count(variant), 0);
    if (variant == "cuda")
        for (size_t i = 0; i < std::size(kOps); ++i)
            if (kOps[i] == op) return launches_[i].load();
    return 0;
}

bool CudaBackend::force_variant(std::string_view op, std::string_view variant) {
    ++variant_epoch_;
    OpVariants* o = variants_of(op);
    return o != nullptr && o->force(variant);
}

std::vector<int64_t> CudaBackend::counters() const {
    std::vector<int64_t> c;
    for (const auto& n : launches_) c.push_back(n.load());
    for (const OpVariants* o : all_variants())
        for (const KernelVariant& v : o->variants()) c.push_back(o->count(v.name));
    return c;
}

void CudaBackend::add_counters(const std::vector<int64_t>& delta) {
    size_t i = 0;
    for (auto& n : launches_) n += delta[i++];
    for (OpVariants* o : all_variants())
        for (size_t v = 0; v < o->variants().size(); ++v) o->count_dispatch(int(v), delta[i++]);
}

void CudaBackend::segment_begin(std::span<const int64_t> key) {
    if (graphs_->begin(key) == StepGraphs::Mode::kCapture) {
        scratch_.take_touched();
        counters_at_begin_ = counters();
    }
}

void CudaBackend::segment_end() {
    const bool capturing = graphs_->mode() == StepGraphs::Mode::kCapture;
    std::vector<int64_t> delta;
    if (capturing) {
        delta = counters();
        for (size_t i = 0; i < delta.size(); ++i) delta[i] -= counters_at_begin_[i];
    }
    const uint32_t touched = capturing ? scratch_.take_touched() : 0;
    if (const std::vector<int64_t>* replayed = graphs_->end(touched, delta)) add_counters(*replayed);
}

}  // namespace di::ops::cuda_impl
