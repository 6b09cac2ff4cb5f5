// CudaBackend's mHC ops (mhc_pre, mhc_post, hc_head) and the residual streams' element type: their params
// from the Args, the split_k / per_mix choice, the launch.
#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/env_switch.h"

namespace di::ops::cuda_impl {
namespace {
// the mHC variants' kernels in OpVariants order (mhc_variants in cuda_ops.cpp)
constexpr cuda::MhcVariant kMhcEnum[] = {cuda::MhcVariant::kSplitK, cuda::MhcVariant::kPerMix};
// DEEPINFER_MHC_TF32=0 keeps the native precision's prefill mixes on the FP64 form (A/B timing, or the exact
// sums where a user wants them).
bool mhc_tf32_enabled() {
    static const bool on = cuda::env_switch("DEEPINFER_MHC_TF32", true);
    return on;
}
}  // namespace

// The native model's residual streams in bf16 (hc_streams.cuh; their cases CudaMhc, CudaFused, CudaSmallOps
// passed on an H100, 2026-12-07): DEEPINFER_BF16_STREAMS=0 keeps them in f32 (A/B timing).
bool CudaBackend::bf16_streams() const {
    static const bool on = cuda::env_switch("DEEPINFER_BF16_STREAMS", true);
    return on;
}

cuda::MhcParams CudaBackend::mhc_pre_params(const MhcPreArgs& a) {
    check(a);
    device_args(a, "mhc_pre");
    const int64_t hc = a.streams.shape[1];
    DI_CHECK(hc <= cuda::mhc_max_hc(), "mhc_pre: hc_mult {} above {}", hc, cuda::mhc_max_hc());
    DI_CHECK(a.comb.stride[1] == hc && a.comb.stride[2] == 1, "mhc_pre.comb {} rows must be contiguous",
             a.comb.describe());
    cuda::MhcParams p{.streams = a.streams.data,
                      .fn = f32(a.fn),
                      .ld_fn = ld(a.fn),
                      .base = f32(a.base),
                      .scale = f32(a.scale),
                      .x = f32m(a.x),
                      .ld_x = ld(a.x),
                      .post = f32m(a.post),
                      .ld_post = ld(a.post),
                      .comb = f32m(a.comb),
                      .ld_comb = ld(a.comb),
                      .n = a.streams.shape[0],
                      .hc = hc,
                      .D = a.streams.shape[2],
                      .norm_eps = a.norm_eps,
                      .hc_eps = a.hc_eps,
                      .sinkhorn_iters = a.sinkhorn_iters,
                      .head = false,
                      .tf32 = a.tf32 && mhc_tf32_enabled(),
                      .bf16 = a.streams.dtype == DType::kBF16};
    return p;
}

int CudaBackend::mhc_variant(OpVariants& ov, const cuda::MhcParams& p) {
    return ov.choose(
        [&](int i, bool) { return kMhcEnum[i] != cuda::MhcVariant::kSplitK || cuda::mhc_split_supported(p); },
        [&] { return fmt::format("hc {} x {}: rows not 16-byte aligned", p.hc, p.D); });
}

bool CudaBackend::mhc_takes_split(const OpVariants& ov, const cuda::MhcParams& p) const {
    constexpr int kSplit = 0;
    static_assert(kMhcEnum[kSplit] == cuda::MhcVariant::kSplitK);
    return ov.picks(kSplit, [&](int i, bool) {
        return kMhcEnum[i] != cuda::MhcVariant::kSplitK || cuda::mhc_split_supported(p);
    });
}

void CudaBackend::mhc_pre(const MhcPreArgs& a) {
    if (replaying()) return;
    const cuda::MhcParams p = mhc_pre_params(a);
    cuda::launch_mhc_pre(p, scratch_, stream_, kMhcEnum[mhc_variant(mhc_pre_v_, p)]);
    launched("mhc_pre");
}

void CudaBackend::mhc_post(const MhcPostArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "mhc_post");
    DI_CHECK(a.streams.is_contiguous() && a.out.is_contiguous(), "mhc_post: streams/out must be contiguous");
    const int64_t hc = a.streams.shape[1];
    DI_CHECK(a.comb.stride[1] == hc && a.comb.stride[2] == 1, "mhc_post.comb {}", a.comb.describe());
    need_f32_rows(a.a, "mhc_post.a");
    cuda::launch_mhc_post(a.streams.data, f32(a.a), ld(a.a), f32(a.post), ld(a.post), f32(a.comb), ld(a.comb),
                          a.out.data, a.streams.dtype == DType::kBF16, a.streams.shape[0], hc,
                          a.streams.shape[2], stream_);
    launched("mhc_post");
}

cuda::MhcParams CudaBackend::hc_head_params(const HcHeadArgs& a) {
    check(a);
    device_args(a, "hc_head");
    const int64_t hc = a.streams.shape[1];
    DI_CHECK(hc <= cuda::mhc_max_hc() && a.streams.is_contiguous(), "hc_head: streams {}",
             a.streams.describe());
    cuda::MhcParams p{.streams = a.streams.data,
                      .fn = f32(a.fn),
                      .ld_fn = ld(a.fn),
                      .base = f32(a.base),
                      .scale = f32(a.scale),
                      .x = f32m(a.out),
                      .ld_x = ld(a.out),
                      .post = nullptr,
                      .ld_post = 0,
                      .comb = nullptr,
                      .ld_comb = 0,
                      .n = a.streams.shape[0],
                      .hc = hc,
                      .D = a.streams.shape[2],
                      .norm_eps = a.norm_eps,
                      .hc_eps = a.hc_eps,
                      .sinkhorn_iters = 0,
                      .head = true,
                      .bf16 = a.streams.dtype == DType::kBF16};
    return p;
}

void CudaBackend::hc_head(const HcHeadArgs& a) {
    if (replaying()) return;
    const cuda::MhcParams p = hc_head_params(a);
    cuda::launch_mhc_pre(p, scratch_, stream_, kMhcEnum[mhc_variant(hc_head_v_, p)]);
    launched("hc_head");
}

}  // namespace di::ops::cuda_impl
