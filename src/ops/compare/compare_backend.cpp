#include "ops/compare/compare_backend.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "ops/ref/ref_backend.h"

namespace di::ops {
namespace {

bool is_float(DType t) { return t == DType::kF32 || t == DType::kBF16; }

// Element i (row-major over the logical shape) of a host view, as double.
double element(const TensorView& v, int64_t i) {
    int64_t off = 0;
    for (int d = v.ndim - 1; d >= 0; --d) {
        off += (i % v.shape[size_t(d)]) * v.stride[size_t(d)];
        i /= v.shape[size_t(d)];
    }
    switch (v.dtype) {
        case DType::kF32:
            return v.ptr<float>()[off];
        case DType::kBF16:
            return bf16_to_f32(v.ptr<uint16_t>()[off]);
        case DType::kI32:
            return v.ptr<int32_t>()[off];
        case DType::kI64:
            return double(v.ptr<int64_t>()[off]);
        case DType::kF8E4M3:  // codes: compared exactly
        case DType::kU8:
            return v.ptr<uint8_t>()[off];
        default:
            return 0;
    }
}

}  // namespace

std::string Divergence::describe() const {
    if (op == "route" || op == "indexer_topk" || field.find("ids") != std::string::npos ||
        field.find("picks") != std::string::npos)
        return fmt::format("{} / {}: {} differs in {} of {} elements", scope, op, field, max_diff, max_ref);
    return fmt::format("{} / {}: {} max |d| {:.3g} vs max |ref| {:.3g} (relative {:.3g})", scope, op, field,
                       max_diff, max_ref, max_diff / std::max(max_ref, 1e-30));
}

CompareBackend::CompareBackend(Backend& subject, double rel_tol)
    : subject_(subject), ref_(make_ref_backend()), rel_tol_(rel_tol) {}
CompareBackend::~CompareBackend() = default;

void CompareBackend::set_scope(std::string_view s) {
    scope_ = s;
    subject_.set_scope(s);
}

TensorView CompareBackend::host_view(const TensorView& v, std::vector<Tensor>& keep) {
    if (v.empty()) return v;
    const size_t bytes = v.span_bytes();  // strided views copy their whole span
    keep.emplace_back(host_allocator(), DType::kU8,
                      std::initializer_list<int64_t>{int64_t(std::max<size_t>(bytes, 1))});
    TensorView h = v;
    h.data = keep.back().view().data;
    h.device = Device::kHost;
    if (bytes > 0) {
        subject_.copy(TensorView::contiguous(h.data, DType::kU8, {int64_t(bytes)}),
                      TensorView::contiguous(v.data, DType::kU8, {int64_t(bytes)}, v.device));
    }
    return h;
}

QWeight CompareBackend::host_weight(const QWeight& w) {
    auto cached = [&](const TensorView& v) {
        if (v.empty() || v.device == Device::kHost) return v;
        auto it = weight_cache_.find(v.data);
        if (it == weight_cache_.end()) {
            std::vector<Tensor> keep;
            host_view(v, keep);
            it = weight_cache_.emplace(v.data, std::move(keep.back())).first;
        }
        TensorView h = v;
        h.data = it->second.view().data;
        h.device = Device::kHost;
        return h;
    };
    QWeight h = w;
    h.data = cached(w.data);
    h.scale = cached(w.scale);
    return h;
}

template <class Args, class Fn>
void CompareBackend::compare(const char* op, const Args& args, Fn&& run) {
    ++n_ops_;
    std::vector<Tensor> keep;
    Args host = args;
    host.visit([&](const char*, TensorView& v, Role) { v = host_view(v, keep); });
    run(host);  // runs the subject on `args` and the reference on `host`
    Args sub = args;
    std::vector<Tensor> keep_sub;
    sub.visit([&](const char*, TensorView& v, Role r) {
        if (r != Role::kIn) v = host_view(v, keep_sub);
    });
    std::vector<std::pair<std::string, std::pair<TensorView, TensorView>>> outs;
    host.visit([&](const char* name, TensorView& v, Role r) {
        if (r != Role::kIn && !v.empty()) outs.push_back({name, {v, {}}});
    });
    size_t k = 0;
    sub.visit([&](const char*, TensorView& v, Role r) {
        if (r != Role::kIn && !v.empty()) outs[k++].second.second = v;
    });
    for (auto& [field, views] : outs) {
        const TensorView &want = views.first, &got = views.second;
        Divergence d{scope_, op, std::string(op) + "." + field};
        bool diverged = false;
        if (is_float(want.dtype)) {
            for (int64_t i = 0; i < want.numel(); ++i) {
                const double r = element(want, i), s = element(got, i);
                d.max_ref = std::max(d.max_ref, std::fabs(r));
                d.max_diff =
                    std::max(d.max_diff, std::isnan(s) != std::isnan(r) ? INFINITY : std::fabs(s - r));
            }
            const double rel = d.max_diff / std::max(d.max_ref, 1e-6);
            if (rel > worst_rel_) {
                worst_rel_ = rel;
                worst_where_ = d.describe();
            }
            diverged = rel > rel_tol_;
        } else {
            for (int64_t i = 0; i < want.numel(); ++i) d.max_diff += element(want, i) != element(got, i);
            d.max_ref = double(want.numel());
            diverged = d.max_diff > 0;
        }
        if (diverged && !first_) first_ = d;
    }
}

#define DI_COMPARE_SIMPLE(method, Args)          \
    void CompareBackend::method(const Args& a) { \
        compare(#method, a, [&](Args& h) {       \
            subject_.method(a);                  \
            ref_->method(h);                     \
        });                                      \
    }
DI_COMPARE_SIMPLE(embed, EmbedArgs)
DI_COMPARE_SIMPLE(cast, CastArgs)
DI_COMPARE_SIMPLE(add, AddArgs)
DI_COMPARE_SIMPLE(swiglu, SwigluArgs)
DI_COMPARE_SIMPLE(rms_norm, RmsNormArgs)
DI_COMPARE_SIMPLE(rope, RopeArgs)
DI_COMPARE_SIMPLE(compress, CompressArgs)
DI_COMPARE_SIMPLE(indexer_topk, IndexerTopkArgs)
DI_COMPARE_SIMPLE(attention, AttentionArgs)
DI_COMPARE_SIMPLE(window_store, WindowStoreArgs)
DI_COMPARE_SIMPLE(mhc_pre, MhcPreArgs)
DI_COMPARE_SIMPLE(mhc_post, MhcPostArgs)
DI_COMPARE_SIMPLE(hc_head, HcHeadArgs)
DI_COMPARE_SIMPLE(route, RouteArgs)
DI_COMPARE_SIMPLE(argmax, ArgmaxArgs)
DI_COMPARE_SIMPLE(act_quant, ActQuantArgs)
#undef DI_COMPARE_SIMPLE

// Not compared: the sampler reads the candidates on the host and checks nothing of them against a reference
// (the op's tests compare every backend's with the host rows).
void CompareBackend::top_candidates(const TopCandidatesArgs& a) { subject_.top_candidates(a); }

void CompareBackend::linear(const LinearArgs& a) {
    compare("linear", a, [&](LinearArgs& h) {
        subject_.linear(a);
        h.w = host_weight(a.w);
        ref_->linear(h);
    });
}

void CompareBackend::moe(const MoeArgs& a) {
    compare("moe", a, [&](MoeArgs& h) {
        subject_.moe(a);
        std::vector<ExpertWeights> ex(static_cast<size_t>(a.n_experts));
        for (int64_t e = 0; e < a.n_experts; ++e)
            ex[size_t(e)] = {host_weight(a.experts[e].w1), host_weight(a.experts[e].w3),
                             host_weight(a.experts[e].w2)};
        h.experts = ex.data();
        ref_->moe(h);
    });
}

}  // namespace di::ops
