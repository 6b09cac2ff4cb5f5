// CudaBackend's fused pairs (Backend::rms_norm_rope, mhc_pre_norm, hc_head_norm, add_mhc_post): each checks
// both ops' args and that the second op reads exactly what the first writes, then runs one launch
// (variant "fused") or, where that does not hold or the allow-list leaves it out, the two ops ("separate").
#include <optional>

#include "ops/cuda/cuda_backend_impl.h"

namespace di::ops::cuda_impl {
namespace {

constexpr int kFused = 0;  // index of "fused" in each pair's OpVariants (fused_variants in cuda_ops.cpp)

bool same_rows(const TensorView& a, const TensorView& b) {
    return a.data == b.data && a.ndim == 2 && b.ndim == 2 && a.shape[0] == b.shape[0] &&
           a.shape[1] == b.shape[1] && a.stride[0] == b.stride[0] && a.stride[1] == 1 && b.stride[1] == 1;
}

cuda::NormOut norm_out(const RmsNormArgs& n) {
    return {.w = n.weight.empty() ? nullptr : n.weight.data,
            .wdt = n.weight.empty() ? Fdt::kF32 : fdt(n.weight.dtype, "rms_norm.weight"),
            .y = f32m(n.y),
            .ld_y = ld(n.y),
            .eps = n.eps};
}

void check_norm(const RmsNormArgs& n) {
    check(n);
    device_args(n, "rms_norm");
    need_f32_rows(n.x, "rms_norm.x"), need_f32_rows(n.y, "rms_norm.y");
    DI_CHECK(n.weight.empty() || n.weight.is_contiguous(), "rms_norm.weight {}", n.weight.describe());
}

}  // namespace

// The fused kernel's job for one pair, or nothing where dispatch runs the two ops (counted either way).
std::optional<cuda::NormRopeJob> CudaBackend::norm_rope_job(const RmsNormArgs& norm, const RopeArgs& r) {
    check_norm(norm);
    check(r);
    device_args(r, "rope");
    const TensorView& x = r.x;  // [n, heads, hd], to be norm.y's rows
    const int64_t ldy = ld(norm.y);
    const bool chained = x.data == norm.y.data && x.ndim == 3 && x.shape[0] * x.shape[1] == norm.y.shape[0] &&
                         x.shape[2] == norm.y.shape[1] && x.stride[2] == 1 && x.stride[1] == ldy &&
                         x.stride[0] == x.shape[1] * ldy && r.positions.is_contiguous() &&
                         r.inv_freq.is_contiguous();
    const int64_t half = r.inv_freq.numel();
    const int v = norm_rope_v_.choose(
        [&](int i, bool) {
            return i != kFused || (chained && cuda::rms_norm_rope_supported(x.shape[2], half));
        },
        [&] { return fmt::format("rope.x {} after norm.y {}", x.describe(), norm.y.describe()); });
    if (v != kFused) return std::nullopt;
    return cuda::NormRopeJob{.x = f32(norm.x),
                             .ldx = ld(norm.x),
                             .norm = norm_out(norm),
                             .rope = {.x = f32m(x),
                                      .s0 = x.stride[0],
                                      .s1 = x.stride[1],
                                      .n = x.shape[0],
                                      .heads = x.shape[1],
                                      .hd = x.shape[2],
                                      .pos = r.positions.ptr<int32_t>(),
                                      .inv_freq = f32(r.inv_freq),
                                      .half = half,
                                      .mscale = r.mscale,
                                      .inverse = r.inverse}};
}

void CudaBackend::rms_norm_rope(const RmsNormArgs& norm, const RopeArgs& r) {
    rms_norm_ropes({&norm, 1}, {&r, 1});
}

void CudaBackend::rms_norm_ropes(std::span<const RmsNormArgs> norms, std::span<const RopeArgs> ropes) {
    if (replaying()) return;
    DI_CHECK(norms.size() == ropes.size(), "rms_norm_ropes: {} norms, {} ropes", norms.size(), ropes.size());
    std::vector<cuda::NormRopeJob> jobs;
    for (size_t i = 0; i < norms.size(); ++i) {
        if (auto j = norm_rope_job(norms[i], ropes[i])) {
            jobs.push_back(*j);
        } else {
            rms_norm(norms[i]);
            rope(ropes[i]);
        }
    }
    if (jobs.empty()) return;
    cuda::launch_rms_norm_ropes(jobs.data(), int64_t(jobs.size()), scratch_, stream_);
    launched("rms_norm"), launched("rope");
}

// mhc_pre or hc_head (`mhc_op`, its variants `mhc`, params p writing `out`) with the norm in its finish
// kernel, when `pair` dispatch takes "fused"; false: the caller runs the two ops.
bool CudaBackend::fused_mhc_norm(OpVariants& pair, OpVariants& mhc, const cuda::MhcParams& p,
                                 const TensorView& out, const RmsNormArgs& norm, const char* mhc_op) {
    const bool chained = same_rows(norm.x, out) && norm.y.shape[0] == out.shape[0];
    const int v =
        pair.choose([&](int i, bool) { return i != kFused || (chained && mhc_takes_split(mhc, p)); },
                    [&] { return fmt::format("{} not on split_k, or norm.x not its output", mhc_op); });
    if (v != kFused) return false;
    mhc_variant(mhc, p);  // counts split_k's dispatch
    cuda::launch_mhc_pre_norm(p, norm_out(norm), scratch_, stream_);
    launched(mhc_op), launched("rms_norm");
    return true;
}

void CudaBackend::mhc_pre_norm(const MhcPreArgs& pre, const RmsNormArgs& norm) {
    if (replaying()) return;
    check_norm(norm);
    if (fused_mhc_norm(pre_norm_v_, mhc_pre_v_, mhc_pre_params(pre), pre.x, norm, "mhc_pre")) return;
    mhc_pre(pre);
    rms_norm(norm);
}

void CudaBackend::hc_head_norm(const HcHeadArgs& head, const RmsNormArgs& norm) {
    if (replaying()) return;
    check_norm(norm);
    if (fused_mhc_norm(head_norm_v_, hc_head_v_, hc_head_params(head), head.out, norm, "hc_head")) return;
    hc_head(head);
    rms_norm(norm);
}

void CudaBackend::add_mhc_post(const AddArgs& sum, const MhcPostArgs& post) {
    if (replaying()) return;
    check(sum);
    device_args(sum, "add");
    need_f32_rows(sum.a, "add.a"), need_f32_rows(sum.b, "add.b"), need_f32_rows(sum.out, "add.out");
    check(post);
    device_args(post, "mhc_post");
    const bool chained = same_rows(post.a, sum.out) && sum.a.shape[0] == sum.out.shape[0] &&
                         sum.b.shape[0] == sum.out.shape[0] && sum.a.shape[1] == sum.out.shape[1] &&
                         sum.b.shape[1] == sum.out.shape[1];
    const int v = add_post_v_.choose([&](int i, bool) { return i != kFused || chained; },
                                     [&] { return std::string("mhc_post.a is not the add's out"); });
    if (v != kFused) {
        add(sum);
        mhc_post(post);
        return;
    }
    DI_CHECK(post.streams.is_contiguous() && post.out.is_contiguous(),
             "mhc_post: streams/out must be contiguous");
    const int64_t hc = post.streams.shape[1];
    DI_CHECK(post.comb.stride[1] == hc && post.comb.stride[2] == 1, "mhc_post.comb {}", post.comb.describe());
    cuda::launch_add_mhc_post(post.streams.data, f32(sum.a), ld(sum.a), f32(sum.b), ld(sum.b), f32m(sum.out),
                              ld(sum.out), f32(post.post), ld(post.post), f32(post.comb), ld(post.comb),
                              post.out.data, post.streams.dtype == DType::kBF16, post.streams.shape[0], hc,
                              post.streams.shape[2], stream_);
    launched("add"), launched("mhc_post");
}

}  // namespace di::ops::cuda_impl
