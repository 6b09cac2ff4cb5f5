// The fused pairs on CUDA (rms_norm_rope, mhc_pre_norm, hc_head_norm, add_mhc_post) against the
// reference backend's separate calls, on each variant: "fused" must really run (its dispatch
// count) and match ref within the parts' own tolerances (ops/op_cases_rows.h), and
// where it claims bit-identity with "separate" (rms_norm_rope, add_mhc_post) equal it bit for bit.
#include <tuple>

#include "gpu_test_util.h"
#include "ops/cuda/kernels.h"
#include "ops/op_cases_rows.h"

namespace di::gputest {
namespace {

namespace cases = ops::cases;
// a norm after mHC, or rope after a norm: the larger of the parts' tolerances
const double kNormRope = std::max(cases::kRmsNormCuda.value, cases::kRopeCuda.value);
const double kMhcNorm = std::max(cases::kMhcCuda.value, cases::kRmsNormCuda.value);

#define SKIP_WITHOUT_GPU() \
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

// NaN bytes in the device copy only (the host copy keeps the reference's result).
void poison_device(const Pair& p) {
    Tensor t(host_allocator(), p.dv().dtype, {p.dv().numel()});
    std::memset(t.view().data, 0xff, t.view().nbytes());
    backends().gpu->copy(p.dv().reshape({p.dv().numel()}), t.view());
}

// Runs `op` on the GPU with `variant` forced, checks that it was dispatched, returns nothing.
template <class Op>
void run_forced(const char* pair, const char* variant, Op&& op) {
    auto& b = backends();
    ASSERT_TRUE(b.gpu->force_variant(pair, variant));
    const int64_t before = b.gpu->dispatch_count(pair, variant);
    op();
    EXPECT_EQ(b.gpu->dispatch_count(pair, variant), before + 1) << pair << "/" << variant << " did not run";
    ASSERT_TRUE(b.gpu->force_variant(pair, ""));
}

TEST(CudaFused, RmsNormRope) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    struct C {
        int64_t n, heads, hd, rope;
        bool weighted, inverse;
    };
    // V4-Flash q (64 heads of 512, unweighted) and kv (one head, weighted); compressor entries of 128;
    // odd token counts, a head dim past 1024 (the 16-per-thread kernel), rope over the whole row; six heads
    // (a warp's four and a group of two), a row width not a multiple of 4 (the block-a-row kernel).
    for (C c : {C{3, 64, 512, 64, false, false}, C{1, 1, 512, 64, true, false}, C{5, 1, 128, 64, true, false},
                C{7, 3, 2048, 64, true, true}, C{2, 2, 16, 16, false, false}, C{9, 6, 512, 64, true, true},
                C{3, 5, 18, 8, true, false}, C{70, 64, 512, 64, false, false}}) {
        const int64_t rows = c.n * c.heads;
        Pair x(DType::kF32, {rows, c.hd}), w(DType::kF32, {c.hd}), pos(DType::kI32, {c.n});
        Pair inv(DType::kF32, {c.rope / 2});
        fill_uniform(x, -3, 3), fill_uniform(w, 0.5f, 1.5f);
        for (int64_t i = 0; i < c.n; ++i) pos.hv().ptr<int32_t>()[i] = int32_t(rng()() % 70000);
        for (int64_t i = 0; i < c.rope / 2; ++i)
            inv.hv().ptr<float>()[i] = std::pow(10000.0f, -2.0f * float(i) / float(c.rope));
        pos.upload(), inv.upload();
        const Tensor x0(host_allocator(), DType::kF32, {rows, c.hd});
        std::memcpy(x0.view().data, x.hv().data, x.hv().nbytes());
        auto args = [&](const TensorView& xv, const TensorView& wv, const TensorView& pv,
                        const TensorView& iv) {
            return std::pair<ops::RmsNormArgs, ops::RopeArgs>{
                {.x = xv, .weight = c.weighted ? wv : TensorView{}, .y = xv, .eps = 1e-6f},
                {.x = xv.reshape({c.n, c.heads, c.hd}),
                 .positions = pv,
                 .inv_freq = iv,
                 .mscale = 1.25f,
                 .inverse = c.inverse}};
        };
        auto [rn, rr] = args(x.hv(), w.hv(), pos.hv(), inv.hv());
        b.ref->rms_norm_rope(rn, rr);  // in place, as the model calls it
        std::vector<float> got[2];
        const char* variants[] = {"fused", "separate"};
        for (int v = 0; v < 2; ++v) {
            b.gpu->copy(x.dv(), x0.view());
            auto [gn, gr] = args(x.dv(), w.dv(), pos.dv(), inv.dv());
            run_forced("rms_norm_rope", variants[v], [&] { b.gpu->rms_norm_rope(gn, gr); });
            expect_close(x, kNormRope,
                         std::string("rms_norm_rope ") + variants[v] + " hd " + std::to_string(c.hd));
            got[v] = x.device_f32();
        }
        EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)))
            << "fused rms_norm_rope is not bit-identical to rms_norm then rope, hd " << c.hd;
    }
}

TEST(CudaFused, MhcPreNormAndHead) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    struct C {
        int64_t n, hc, D;
        DType w;
    };
    // 2,056 tokens: a prefill's (mhc_pre's sums on the FP64 tensor cores, then the finish kernel's norm); f32
    // and bf16 streams (the native precision's)
    for (const DType sd : {DType::kF32, DType::kBF16})
        for (C c : {C{1, 4, 4096, DType::kBF16}, C{9, 4, 4096, DType::kF32}, C{2, 4, 100, DType::kF32},
                    C{2056, 4, 4096, DType::kBF16}}) {
            const int64_t M = (2 + c.hc) * c.hc;
            Pair st(sd, {c.n, c.hc, c.D}), fn(DType::kF32, {M, c.hc * c.D}), base(DType::kF32, {M});
            Pair scale(DType::kF32, {3}), x(DType::kF32, {c.n, c.D}), y(DType::kF32, {c.n, c.D}),
                w(c.w, {c.D});
            Pair post(DType::kF32, {c.n, c.hc}), comb(DType::kF32, {c.n, c.hc, c.hc});
            Pair hfn(DType::kF32, {c.hc, c.hc * c.D}), hbase(DType::kF32, {c.hc}), hscale(DType::kF32, {1});
            fill_uniform(st), fill_uniform(fn, -0.05f, 0.05f), fill_uniform(base),
                fill_uniform(scale, 0.5f, 2.0f);
            fill_uniform(hfn, -0.05f, 0.05f), fill_uniform(hbase), fill_uniform(hscale, 0.5f, 2.0f);
            fill_uniform(w, 0.5f, 1.5f);
            auto pre = [&](bool dev) -> ops::MhcPreArgs {
                auto v = [&](const Pair& p) { return dev ? p.dv() : p.hv(); };
                return {v(st), v(fn), v(base), v(scale), v(x), v(post), v(comb), 1e-6f, 1e-6f, 20};
            };
            auto norm = [&](bool dev) -> ops::RmsNormArgs {
                return {
                    .x = dev ? x.dv() : x.hv(), .weight = dev ? w.dv() : w.hv(), .y = dev ? y.dv() : y.hv()};
            };
            x.poison(), y.poison(), post.poison(), comb.poison();
            b.ref->mhc_pre_norm(pre(false), norm(false));
            for (const char* variant : {"fused", "separate"}) {
                for (const Pair* p : {&x, &y, &post, &comb}) poison_device(*p);
                run_forced("mhc_pre_norm", variant, [&] { b.gpu->mhc_pre_norm(pre(true), norm(true)); });
                const std::string tag = std::string(variant) + " n " + std::to_string(c.n) + " D " +
                                        std::to_string(c.D) + " " + std::string(dtype_name(sd));
                expect_close(x, cases::kMhcCuda.value, "mhc_pre_norm.x " + tag),
                    expect_close(y, kMhcNorm, "mhc_pre_norm.y " + tag);
                expect_close(post, cases::kMhcCuda.value, "mhc_pre_norm.post " + tag),
                    expect_close(comb, cases::kMhcCuda.value, "mhc_pre_norm.comb " + tag);
            }
            if (c.n >= cuda::kMhcDmmaMinTokens) {  // a prefill's TF32 mixes (the native precision)
                for (const Pair* p : {&x, &y, &post, &comb}) poison_device(*p);
                ops::MhcPreArgs tf = pre(true);
                tf.tf32 = true;
                run_forced("mhc_pre_norm", "fused", [&] { b.gpu->mhc_pre_norm(tf, norm(true)); });
                for (const auto& [p, name] :
                     {std::pair{&x, "x"}, {&y, "y"}, {&post, "post"}, {&comb, "comb"}}) {
                    const Diff d = diff(p->host_f32(), p->device_f32());
                    std::printf("mhc_pre_norm tf32 n %lld %s streams: %s relative L2 %.3g, max abs %.3g\n",
                                (long long)c.n, std::string(dtype_name(sd)).c_str(), name, d.rel_l2,
                                d.max_abs);
                    expect_close(*p, cases::kMhcTf32Cuda.value, std::string("mhc_pre_norm tf32 ") + name);
                }
            }
            // the head: its out normed in place, as the model calls it
            auto head = [&](bool dev) -> ops::HcHeadArgs {
                auto v = [&](const Pair& p) { return dev ? p.dv() : p.hv(); };
                return {v(st), v(hfn), v(hbase), v(hscale), v(y), 1e-6f, 1e-6f};
            };
            auto head_norm = [&](bool dev) -> ops::RmsNormArgs {
                return {
                    .x = dev ? y.dv() : y.hv(), .weight = dev ? w.dv() : w.hv(), .y = dev ? y.dv() : y.hv()};
            };
            y.poison();
            b.ref->hc_head_norm(head(false), head_norm(false));
            for (const char* variant : {"fused", "separate"}) {
                poison_device(y);
                run_forced("hc_head_norm", variant,
                           [&] { b.gpu->hc_head_norm(head(true), head_norm(true)); });
                expect_close(y, kMhcNorm,
                             std::string("hc_head_norm ") + variant + " D " + std::to_string(c.D) + " " +
                                 std::string(dtype_name(sd)));
            }
        }
    // Where mhc_pre does not take split_k, the pair runs separately and still matches.
    ASSERT_TRUE(b.gpu->force_variant("mhc_pre", "per_mix"));
    const int64_t fused_before = b.gpu->dispatch_count("mhc_pre_norm", "fused");
    Pair st(DType::kF32, {2, 4, 64}), fn(DType::kF32, {24, 256}), base(DType::kF32, {24}),
        scale(DType::kF32, {3});
    Pair x(DType::kF32, {2, 64}), y(DType::kF32, {2, 64}), post(DType::kF32, {2, 4}),
        comb(DType::kF32, {2, 4, 4});
    fill_uniform(st), fill_uniform(fn, -0.05f, 0.05f), fill_uniform(base), fill_uniform(scale, 0.5f, 2.0f);
    b.ref->mhc_pre_norm(
        {st.hv(), fn.hv(), base.hv(), scale.hv(), x.hv(), post.hv(), comb.hv(), 1e-6f, 1e-6f, 20},
        {.x = x.hv(), .weight = {}, .y = y.hv()});
    b.gpu->mhc_pre_norm(
        {st.dv(), fn.dv(), base.dv(), scale.dv(), x.dv(), post.dv(), comb.dv(), 1e-6f, 1e-6f, 20},
        {.x = x.dv(), .weight = {}, .y = y.dv()});
    expect_close(y, kMhcNorm, "mhc_pre_norm on per_mix");
    EXPECT_EQ(b.gpu->dispatch_count("mhc_pre_norm", "fused"), fused_before);
    ASSERT_TRUE(b.gpu->force_variant("mhc_pre", ""));
}

TEST(CudaFused, AddMhcPost) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    for (const DType sd : {DType::kF32, DType::kBF16})
        for (auto [n, hc, D] :
             {std::tuple<int64_t, int64_t, int64_t>{1, 4, 4096}, {7, 4, 4096}, {3, 2, 33}}) {
            Pair st(sd, {n, hc, D}), a(DType::kF32, {n, D}), s(DType::kF32, {n, D});
            Pair post(DType::kF32, {n, hc}), comb(DType::kF32, {n, hc, hc}), out(sd, {n, hc, D});
            fill_uniform(st), fill_uniform(a), fill_uniform(s), fill_uniform(post), fill_uniform(comb);
            const Tensor a0(host_allocator(), DType::kF32, {n, D});
            std::memcpy(a0.view().data, a.hv().data, a.hv().nbytes());
            out.poison();
            // a += s in place, then mhc_post of it, as the model calls it
            b.ref->add_mhc_post({a.hv(), s.hv(), a.hv()}, {st.hv(), a.hv(), post.hv(), comb.hv(), out.hv()});
            std::vector<float> got[2], sum[2];
            const char* variants[] = {"fused", "separate"};
            for (int v = 0; v < 2; ++v) {
                b.gpu->copy(a.dv(), a0.view());
                poison_device(out);
                run_forced("add_mhc_post", variants[v], [&] {
                    b.gpu->add_mhc_post({a.dv(), s.dv(), a.dv()},
                                        {st.dv(), a.dv(), post.dv(), comb.dv(), out.dv()});
                });
                expect_close(a, cases::kCopyExact.value, std::string("add_mhc_post sum ") + variants[v]);
                expect_close(out, sd == DType::kF32 ? cases::kMhcCuda.value : cases::kMhcPostBf16Cuda.value,
                             std::string("add_mhc_post ") + variants[v] + " " + std::string(dtype_name(sd)));
                got[v] = out.device_f32(), sum[v] = a.device_f32();
            }
            EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)))
                << "fused add_mhc_post is not bit-identical to add then mhc_post";
        }
}

}  // namespace
}  // namespace di::gputest
