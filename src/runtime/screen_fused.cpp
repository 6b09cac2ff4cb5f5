// Screen cases of the fused pairs (ops::Backend::rms_norm_rope, mhc_pre_norm, hc_head_norm, add_mhc_post) on
// the model's own dimensions, each output of both parts compared: the q heads' and the kv row's norm +
// rope, mhc_pre with the input norm (x, post, comb and the normed x), the hc head with the final norm, and
// the MoE's routed + shared sum with mhc_post (the sum and the new streams). The reference is the reference
// backend's two calls on host copies, computed before any candidate runs; the parts' own variants stay
// allowed in both runs (the one-launch kernel builds on them).
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "ops/ref/ref_backend.h"
#include "runtime/screen_judge.h"

namespace di::runtime::screen_detail {
namespace {

using RunFn = std::function<void(const TensorView&)>;

// A view of columns [col, col + shape's last) of the rows of o ([n, W]), shaped `shape`.
TensorView part(const TensorView& o, int64_t col, std::initializer_list<int64_t> shape) {
    TensorView v = TensorView::contiguous(o.ptr<float>() + col, DType::kF32, shape, o.device);
    v.stride[0] = o.shape[1];
    return v;
}

void screen_norm_rope(ops::Backend& be, const std::vector<const ops::KernelVariant*>& cands,
                      const model::ModelConfig& cfg, const model::ModelWeights& w,
                      const std::vector<int64_t>& batches, std::mt19937_64& rng,
                      std::vector<ScreenRow>& rows) {
    const float eps = float(cfg.rms_norm_eps);
    const model::RopeFreqs f = model::rope_freqs(cfg.rope_main, cfg.rope_dim, cfg.max_position_embeddings);
    Tensor inv = host_tensor(DType::kF32, {int64_t(f.inv_freq.size())});
    std::memcpy(inv.view().data, f.inv_freq.data(), f.inv_freq.size() * sizeof(float));
    const Buf inv_d = on_device(be, inv);
    const TensorView kv_norm = w.layers.empty() ? TensorView{} : w.layers[0].attn.kv_norm;
    Buf kv_host;
    if (!kv_norm.empty()) kv_host = copy_of(be, host_allocator(), kv_norm);
    struct Case {
        const char* what;
        int64_t heads;
        bool weighted;
    };
    for (const Case c : {Case{"q heads", cfg.n_heads, false}, Case{"kv row", 1, true}}) {
        if (c.weighted && kv_norm.empty()) continue;
        const int64_t hd = cfg.head_dim;
        for (int64_t n : batches) {
            Tensor x = host_tensor(DType::kF32, {n * c.heads, hd}), pos = host_tensor(DType::kI32, {n});
            fill_uniform(x, rng, -3, 3);
            for (int64_t i = 0; i < n; ++i)
                pos.view().ptr<int32_t>()[i] = int32_t(rng() % uint64_t(cfg.max_position_embeddings));
            Tensor ref_out = host_tensor(DType::kF32, {n * c.heads, hd});
            std::memcpy(ref_out.view().data, x.view().data, x.view().nbytes());
            auto args = [&](const TensorView& o, const TensorView& p, const TensorView& iv,
                            const TensorView& wt, int64_t rows_n) {
                return std::pair<ops::RmsNormArgs, ops::RopeArgs>{
                    {.x = o, .weight = c.weighted ? wt : TensorView{}, .y = o, .eps = eps},
                    {.x = o.reshape({rows_n, c.heads, hd}),
                     .positions = p,
                     .inv_freq = iv,
                     .mscale = f.mscale}};
            };
            const auto [rn, rr] = args(ref_out.view(), pos.view(), inv.view(), kv_host.v, n);
            ops::make_ref_backend()->rms_norm_rope(rn, rr);
            const std::vector<float> ref = floats_of(ref_out);
            const Buf xd = on_device(be, x), pd = on_device(be, pos);
            Tensor y(be.allocator(), DType::kF32, {n * c.heads, hd}),
                y1(be.allocator(), DType::kF32, {c.heads, hd});
            const RunFn run = [&](const TensorView& o) {
                be.copy(o, xd.v);  // in place, as the model calls it
                const auto [gn, gr] = args(o, pd.v, inv_d.v, kv_norm, n);
                be.rms_norm_rope(gn, gr);
            };
            const RunFn one = [&](const TensorView& o) {
                be.copy(o, xd.v.rows(0, c.heads));
                const auto [gn, gr] = args(o, pd.v.rows(0, 1), inv_d.v, kv_norm, 1);
                be.rms_norm_rope(gn, gr);
            };
            const std::string shape = fmt::format("{}: {} x {}, n={}", c.what, c.heads, hd, n);
            for (const ops::KernelVariant* v : cands)
                rows.push_back(judge(be, *v, shape, ref, hd, y.view(), run, y1.view(), n > 1 ? one : nullptr,
                                     {}, {"rms_norm", "rope"}));
        }
    }
}

void screen_pre_norm(ops::Backend& be, const std::vector<const ops::KernelVariant*>& pre_cands,
                     const std::vector<const ops::KernelVariant*>& head_cands, const model::ModelConfig& cfg,
                     const model::ModelWeights& w, const std::vector<int64_t>& batches, std::mt19937_64& rng,
                     std::vector<ScreenRow>& rows) {
    const int64_t hc = cfg.hc_mult, D = cfg.hidden_dim;
    const float eps = float(cfg.rms_norm_eps), hc_eps = float(cfg.hc_eps);
    std::vector<Buf> keep;
    auto host = [&](const TensorView& v) {
        keep.push_back(copy_of(be, host_allocator(), v));
        return keep.back().v;
    };
    if (!w.layers.empty() && !pre_cands.empty()) {
        const model::HcWeights& hw = w.layers[0].hc_attn;
        const TensorView fn = host(hw.fn), base = host(hw.base), scale = host(hw.scale),
                         nw = host(w.layers[0].attn_norm);
        const int64_t W = D + hc + hc * hc + D;  // one output row: x, post, comb, the normed x
        auto args = [&](const TensorView& st, const TensorView& f, const TensorView& b, const TensorView& sc,
                        const TensorView& wt, const TensorView& o) {
            const int64_t n = o.shape[0];
            const TensorView x = part(o, 0, {n, D});
            return std::pair<ops::MhcPreArgs, ops::RmsNormArgs>{
                {st, f, b, sc, x, part(o, D, {n, hc}), part(o, D + hc, {n, hc, hc}), eps, hc_eps,
                 int(cfg.hc_sinkhorn_iters)},
                {.x = x, .weight = wt, .y = part(o, D + hc + hc * hc, {n, D}), .eps = eps}};
        };
        for (int64_t n : batches) {
            Tensor st = host_tensor(DType::kF32, {n, hc, D}), out = host_tensor(DType::kF32, {n, W});
            fill_uniform(st, rng, -1, 1);
            const auto [rp, rn] = args(st.view(), fn, base, scale, nw, out.view());
            ops::make_ref_backend()->mhc_pre_norm(rp, rn);
            const std::vector<float> ref = floats_of(out);
            const Buf sd = on_device(be, st);
            Tensor y(be.allocator(), DType::kF32, {n, W}), y1(be.allocator(), DType::kF32, {1, W});
            auto call = [&](const TensorView& s, const TensorView& o) {
                const auto [gp, gn] = args(s, hw.fn, hw.base, hw.scale, w.layers[0].attn_norm, o);
                be.mhc_pre_norm(gp, gn);
            };
            const RunFn run = [&](const TensorView& o) { call(sd.v, o); };
            const RunFn one = [&](const TensorView& o) { call(sd.v.rows(0, 1), o); };
            Compare segs;  // each output within the tolerance (x's norm would hide post and comb)
            segs.segments = {{0, size_t(n * D), size_t(D), size_t(W)},
                             {size_t(D), size_t(n * hc), size_t(hc), size_t(W)},
                             {size_t(D + hc), size_t(n * hc * hc), size_t(hc * hc), size_t(W)},
                             {size_t(D + hc + hc * hc), size_t(n * D), size_t(D), size_t(W)}};
            const std::string shape = fmt::format("hc {} x {}, n={}", hc, D, n);
            for (const ops::KernelVariant* v : pre_cands)
                rows.push_back(judge(be, *v, shape, ref, hc * D, y.view(), run, y1.view(),
                                     n > 1 ? one : nullptr, segs, {"mhc_pre", "rms_norm"}));
        }
    }
    if (!head_cands.empty()) {
        const TensorView fn = host(w.hc_head.fn), base = host(w.hc_head.base), scale = host(w.hc_head.scale),
                         nw = host(w.norm);
        for (int64_t n : batches) {
            Tensor st = host_tensor(DType::kF32, {n, hc, D}), out = host_tensor(DType::kF32, {n, D});
            fill_uniform(st, rng, -1, 1);
            ops::make_ref_backend()->hc_head_norm(
                {st.view(), fn, base, scale, out.view(), eps, hc_eps},
                {.x = out.view(), .weight = nw, .y = out.view(), .eps = eps});
            const std::vector<float> ref = floats_of(out);
            const Buf sd = on_device(be, st);
            Tensor y(be.allocator(), DType::kF32, {n, D}), y1(be.allocator(), DType::kF32, {1, D});
            auto call = [&](const TensorView& s, const TensorView& o) {
                be.hc_head_norm({s, w.hc_head.fn, w.hc_head.base, w.hc_head.scale, o, eps, hc_eps},
                                {.x = o, .weight = w.norm, .y = o, .eps = eps});
            };
            const RunFn run = [&](const TensorView& o) { call(sd.v, o); };
            const RunFn one = [&](const TensorView& o) { call(sd.v.rows(0, 1), o); };
            const std::string shape = fmt::format("hc {} x {}, n={}", hc, D, n);
            for (const ops::KernelVariant* v : head_cands)
                rows.push_back(judge(be, *v, shape, ref, hc * D, y.view(), run, y1.view(),
                                     n > 1 ? one : nullptr, {}, {"hc_head", "rms_norm"}));
        }
    }
}

// The output buffer holds the sum [n, D] then the new streams [n, hc, D] (mhc_post wants contiguous
// streams), so row 0 is not a prefix of it: no batch-invariance check here (mhc_post's rows are
// independent sums of the same form).
void screen_add_post(ops::Backend& be, const std::vector<const ops::KernelVariant*>& cands,
                     const model::ModelConfig& cfg, const std::vector<int64_t>& batches, std::mt19937_64& rng,
                     std::vector<ScreenRow>& rows) {
    const int64_t hc = cfg.hc_mult, D = cfg.hidden_dim;
    for (int64_t n : batches) {
        Tensor a = host_tensor(DType::kF32, {n, D}), b = host_tensor(DType::kF32, {n, D});
        Tensor st = host_tensor(DType::kF32, {n, hc, D}), post = host_tensor(DType::kF32, {n, hc}),
               comb = host_tensor(DType::kF32, {n, hc, hc});
        for (Tensor* t : {&a, &b, &st, &post, &comb}) fill_uniform(*t, rng, -1, 1);
        auto args = [&](const TensorView& bv, const TensorView& sv, const TensorView& pv,
                        const TensorView& cv, const TensorView& o) {
            const TensorView sum = TensorView::contiguous(o.data, DType::kF32, {n, D}, o.device);
            const TensorView out =
                TensorView::contiguous(o.ptr<float>() + n * D, DType::kF32, {n, hc, D}, o.device);
            return std::pair<ops::AddArgs, ops::MhcPostArgs>{
                {.a = sum, .b = bv, .out = sum},
                {.streams = sv, .a = sum, .post = pv, .comb = cv, .out = out}};
        };
        Tensor out = host_tensor(DType::kF32, {n * D + n * hc * D});
        std::memcpy(out.view().data, a.view().data, a.view().nbytes());
        const auto [rs, rp] = args(b.view(), st.view(), post.view(), comb.view(), out.view());
        ops::make_ref_backend()->add_mhc_post(rs, rp);
        const std::vector<float> ref = floats_of(out);
        const Buf ad = on_device(be, a), bd = on_device(be, b), sd = on_device(be, st),
                  pd = on_device(be, post), cd = on_device(be, comb);
        Tensor y(be.allocator(), DType::kF32, {n * D + n * hc * D});
        const RunFn run = [&](const TensorView& o) {
            be.copy(o.rows(0, n * D), ad.v.reshape({n * D}));  // the sum is in place, as the model calls it
            const auto [gs, gp] = args(bd.v, sd.v, pd.v, cd.v, o);
            be.add_mhc_post(gs, gp);
        };
        Compare segs;
        segs.segments = {{0, size_t(n * D), size_t(D), size_t(D)},
                         {size_t(n * D), size_t(n * hc * D), size_t(hc * D), size_t(hc * D)}};
        const std::string shape = fmt::format("hc {} x {}, n={}", hc, D, n);
        for (const ops::KernelVariant* v : cands)
            rows.push_back(judge(be, *v, shape, ref, hc + 1, y.view(), run, TensorView{}, nullptr, segs,
                                 {"add", "mhc_post"}));
    }
}

}  // namespace

bool is_fused_pair(std::string_view op) {
    return op == "rms_norm_rope" || op == "mhc_pre_norm" || op == "hc_head_norm" || op == "add_mhc_post";
}

void screen_fused(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                  const model::ModelConfig& cfg, const model::ModelWeights& w,
                  const std::vector<int64_t>& batches, std::mt19937_64& rng, std::vector<ScreenRow>& rows) {
    if (const auto c = candidates(variants, "rms_norm_rope"); !c.empty())
        screen_norm_rope(be, c, cfg, w, batches, rng, rows);
    const auto pre = candidates(variants, "mhc_pre_norm"), head = candidates(variants, "hc_head_norm");
    if (!pre.empty() || !head.empty()) screen_pre_norm(be, pre, head, cfg, w, batches, rng, rows);
    if (const auto c = candidates(variants, "add_mhc_post"); !c.empty())
        screen_add_post(be, c, cfg, batches, rng, rows);
}

}  // namespace di::runtime::screen_detail
