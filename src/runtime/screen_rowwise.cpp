// Screen cases of the row-wise ops and the KV compressor on the model's own dimensions: rms_norm (the hidden
// rows with the attention norm's weights, q's low-rank rows with q_norm's), rope (q's heads forward and the
// attention output's inverse rotation, the compressed entries on the compressor's table), swiglu (the
// experts' width at the model's clamp), mhc_post (streams and a sub-layer's output) and compress (a chunk
// closing a window of each compressor kind the model has: the entries and every state buffer compared). The
// reference is the reference backend on host copies; in-place ops and the compressor's state restart from
// the same inputs on every run.
#include <fmt/format.h>

#include <cstring>

#include "ops/ref/ref_backend.h"
#include "runtime/screen_judge.h"

namespace di::runtime::screen_detail {
namespace {

using RunFn = std::function<void(const TensorView&)>;

// Rows [first, first + count) of a flat f32 buffer as a contiguous view of `shape`.
TensorView slice(const TensorView& flat, int64_t first, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(flat.ptr<float>() + first, DType::kF32, shape, flat.device);
}

void screen_norms(ops::Backend& be, const std::vector<const ops::KernelVariant*>& cands,
                  const model::ModelConfig& cfg, const model::ModelWeights& w,
                  const std::vector<int64_t>& batches, std::mt19937_64& rng, std::vector<ScreenRow>& rows) {
    if (w.layers.empty()) return;
    const float eps = float(cfg.rms_norm_eps);
    struct Case {
        const char* what;
        TensorView weight;
    };
    for (const Case& c :
         {Case{"hidden", w.layers[0].attn_norm}, Case{"q low rank", w.layers[0].attn.q_norm}}) {
        if (c.weight.empty()) continue;
        const int64_t d = c.weight.numel();
        const Buf wh = copy_of(be, host_allocator(), c.weight);
        for (const int64_t n : batches) {
            Tensor x = host_tensor(DType::kF32, {n, d}), out = host_tensor(DType::kF32, {n, d});
            fill_uniform(x, rng, -3, 3);
            ops::make_ref_backend()->rms_norm({.x = x.view(), .weight = wh.v, .y = out.view(), .eps = eps});
            const std::vector<float> ref = floats_of(out);
            const Buf xd = on_device(be, x);
            Tensor y(be.allocator(), DType::kF32, {n, d}), y1(be.allocator(), DType::kF32, {1, d});
            const RunFn run = [&](const TensorView& o) {
                be.rms_norm({.x = xd.v, .weight = c.weight, .y = o, .eps = eps});
            };
            const RunFn one = [&](const TensorView& o) {
                be.rms_norm({.x = xd.v.rows(0, 1), .weight = c.weight, .y = o, .eps = eps});
            };
            const std::string shape = fmt::format("{}: {}, n={}", c.what, d, n);
            for (const ops::KernelVariant* v : cands)
                rows.push_back(judge(be, *v, shape, ref, d, y.view(), run, y1.view(), n > 1 ? one : nullptr));
        }
    }
}

void screen_ropes(ops::Backend& be, const std::vector<const ops::KernelVariant*>& cands,
                  const model::ModelConfig& cfg, const std::vector<int64_t>& batches, std::mt19937_64& rng,
                  std::vector<ScreenRow>& rows) {
    struct Case {
        const char* what;
        const model::RopeTable* table;
        int64_t heads;
        bool inverse;
    };
    const int64_t hd = cfg.head_dim;
    for (const Case& c : {Case{"q heads", &cfg.rope_main, cfg.n_heads, false},
                          Case{"output, inverse", &cfg.rope_main, cfg.n_heads, true},
                          Case{"compressed entries", &cfg.rope_compress, 1, false}}) {
        const model::RopeFreqs f = model::rope_freqs(*c.table, cfg.rope_dim, cfg.max_position_embeddings);
        Tensor inv = host_tensor(DType::kF32, {int64_t(f.inv_freq.size())});
        std::memcpy(inv.view().data, f.inv_freq.data(), f.inv_freq.size() * sizeof(float));
        const Buf inv_d = on_device(be, inv);
        for (const int64_t n : batches) {
            Tensor x = host_tensor(DType::kF32, {n, c.heads, hd}), pos = host_tensor(DType::kI32, {n});
            fill_uniform(x, rng, -3, 3);
            for (int64_t i = 0; i < n; ++i)
                pos.view().ptr<int32_t>()[i] = int32_t(rng() % uint64_t(cfg.max_position_embeddings));
            Tensor out = host_tensor(DType::kF32, {n, c.heads, hd});
            std::memcpy(out.view().data, x.view().data, x.view().nbytes());
            auto args = [&](const TensorView& o, const TensorView& p, const TensorView& iv) {
                return ops::RopeArgs{
                    .x = o, .positions = p, .inv_freq = iv, .mscale = f.mscale, .inverse = c.inverse};
            };
            ops::make_ref_backend()->rope(args(out.view(), pos.view(), inv.view()));
            const std::vector<float> ref = floats_of(out);
            const Buf xd = on_device(be, x), pd = on_device(be, pos);
            Tensor y(be.allocator(), DType::kF32, {n, c.heads, hd}),
                y1(be.allocator(), DType::kF32, {1, c.heads, hd});
            const RunFn run = [&](const TensorView& o) {
                be.copy(o, xd.v);  // in place, as the model calls it
                be.rope(args(o, pd.v, inv_d.v));
            };
            const RunFn one = [&](const TensorView& o) {
                be.copy(o, xd.v.rows(0, 1));
                be.rope(args(o, pd.v.rows(0, 1), inv_d.v));
            };
            const std::string shape = fmt::format("{}: {} x {}, n={}", c.what, c.heads, hd, n);
            for (const ops::KernelVariant* v : cands)
                rows.push_back(judge(be, *v, shape, ref, 2, y.view(), run, y1.view(), n > 1 ? one : nullptr));
        }
    }
}

void screen_swiglu(ops::Backend& be, const std::vector<const ops::KernelVariant*>& cands,
                   const model::ModelConfig& cfg, const std::vector<int64_t>& batches, std::mt19937_64& rng,
                   std::vector<ScreenRow>& rows) {
    const int64_t I = cfg.moe_dim;
    const float limit =
        cfg.swiglu_limit > 0 ? float(cfg.swiglu_limit) : std::numeric_limits<float>::infinity();
    for (const int64_t n : batches) {
        // past the clamp on both sides, so the limit is part of every case
        const float span = std::isfinite(limit) ? 2 * limit : 8.0f;
        Tensor g = host_tensor(DType::kF32, {n, I}), u = host_tensor(DType::kF32, {n, I}),
               out = host_tensor(DType::kF32, {n, I});
        fill_uniform(g, rng, -span, span), fill_uniform(u, rng, -span, span);
        ops::make_ref_backend()->swiglu(
            {.gate = g.view(), .up = u.view(), .out = out.view(), .limit = limit});
        const std::vector<float> ref = floats_of(out);
        const Buf gd = on_device(be, g), ud = on_device(be, u);
        Tensor y(be.allocator(), DType::kF32, {n, I}), y1(be.allocator(), DType::kF32, {1, I});
        const RunFn run = [&](const TensorView& o) {
            be.swiglu({.gate = gd.v, .up = ud.v, .out = o, .limit = limit});
        };
        const RunFn one = [&](const TensorView& o) {
            be.swiglu({.gate = gd.v.rows(0, 1), .up = ud.v.rows(0, 1), .out = o, .limit = limit});
        };
        const std::string shape = fmt::format("{}, limit {}, n={}", I, limit, n);
        for (const ops::KernelVariant* v : cands)
            rows.push_back(judge(be, *v, shape, ref, 2, y.view(), run, y1.view(), n > 1 ? one : nullptr));
    }
}

void screen_mhc_post(ops::Backend& be, const std::vector<const ops::KernelVariant*>& cands,
                     const model::ModelConfig& cfg, const std::vector<int64_t>& batches, std::mt19937_64& rng,
                     std::vector<ScreenRow>& rows) {
    const int64_t hc = cfg.hc_mult, D = cfg.hidden_dim;
    // f32 streams (exact) and bf16 ones (native: post's f32 sums rounded to bf16)
    for (const DType sdt : {DType::kF32, DType::kBF16})
        for (const int64_t n : batches) {
            Tensor st = host_tensor(DType::kF32, {n, hc, D}), a = host_tensor(DType::kF32, {n, D}),
                   post = host_tensor(DType::kF32, {n, hc}), comb = host_tensor(DType::kF32, {n, hc, hc}),
                   out = host_tensor(sdt, {n, hc, D});
            fill_uniform(st, rng, -1, 1), fill_uniform(a, rng, -1, 1), fill_uniform(post, rng, 0, 2),
                fill_uniform(comb, rng, 0, 1);
            if (sdt != DType::kF32) st = bf16_streams_of(st);
            ops::make_ref_backend()->mhc_post({.streams = st.view(),
                                               .a = a.view(),
                                               .post = post.view(),
                                               .comb = comb.view(),
                                               .out = out.view()});
            const std::vector<float> ref = floats_of(out);
            const Buf sd = on_device(be, st), ad = on_device(be, a), pd = on_device(be, post),
                      cd = on_device(be, comb);
            Tensor y(be.allocator(), sdt, {n, hc, D}), y1(be.allocator(), sdt, {1, hc, D});
            const RunFn run = [&](const TensorView& o) {
                be.mhc_post({.streams = sd.v, .a = ad.v, .post = pd.v, .comb = cd.v, .out = o});
            };
            const RunFn one = [&](const TensorView& o) {
                be.mhc_post({.streams = sd.v.rows(0, 1),
                             .a = ad.v.rows(0, 1),
                             .post = pd.v.rows(0, 1),
                             .comb = cd.v.rows(0, 1),
                             .out = o});
            };
            const std::string shape =
                fmt::format("hc {} x {}, n={}{}", hc, D, n, sdt == DType::kF32 ? "" : ", bf16 streams");
            for (const ops::KernelVariant* v : cands)
                rows.push_back(
                    judge(be, *v, shape, ref, hc + 1, y.view(), run, y1.view(), n > 1 ? one : nullptr));
        }
}

// A chunk of n tokens ending past a window boundary of each compressor kind (the first CSA and HCA layers'
// compressors, the first CSA layer's indexer compressor), on its position bias, from random state. The output
// buffer holds the entries, then buf_kv, buf_gate, ovl_kv and ovl_gate, each compared on its own.
void screen_compress(ops::Backend& be, const std::vector<const ops::KernelVariant*>& cands,
                     const model::ModelConfig& cfg, const model::ModelWeights& w,
                     const std::vector<int64_t>& batches, std::mt19937_64& rng,
                     std::vector<ScreenRow>& rows) {
    struct Kind {
        const char* what;
        const model::CompressorWeights* cw;
        int64_t d, rate;
        bool overlap;
    };
    std::vector<Kind> kinds;
    bool csa = false, hca = false;
    for (int l = 0; l < int(cfg.n_layers) && l < int(w.layers.size()); ++l) {
        const model::AttnType t = cfg.attn_types[size_t(l)];
        const model::AttentionWeights& aw = w.layers[size_t(l)].attn;
        if (t == model::AttnType::kCsa && !csa) {
            csa = true;
            kinds.push_back({"csa entries", &aw.compressor, cfg.head_dim, cfg.csa_rate, true});
            kinds.push_back({"indexer entries", &aw.index_compressor, cfg.index_dim, cfg.csa_rate, true});
        } else if (t == model::AttnType::kHca && !hca) {
            hca = true;
            kinds.push_back({"hca entries", &aw.compressor, cfg.head_dim, cfg.hca_rate, false});
        }
    }
    for (const Kind& k : kinds) {
        if (k.cw->ape.empty()) continue;
        const int64_t width = k.overlap ? 2 * k.d : k.d, ovl = k.overlap ? k.rate * k.d : 0;
        const Buf bias = copy_of(be, host_allocator(), k.cw->ape);
        for (const int64_t n : batches) {
            const int64_t pos0 = 3 * k.rate - 1, n_new = ops::CompressArgs::n_new(pos0, n, k.rate);
            // the flat output: entries, then the four state buffers
            const int64_t at_bkv = n_new * k.d, at_bgate = at_bkv + k.rate * width,
                          at_okv = at_bgate + k.rate * width, at_ogate = at_okv + ovl, size = at_ogate + ovl;
            Tensor kv = host_tensor(DType::kF32, {n, width}), gate = host_tensor(DType::kF32, {n, width}),
                   state = host_tensor(DType::kF32, {size}), out = host_tensor(DType::kF32, {size});
            fill_uniform(kv, rng, -2, 2), fill_uniform(gate, rng, -2, 2), fill_uniform(state, rng, -2, 2);
            std::memcpy(out.view().data, state.view().data, state.view().nbytes());
            auto args = [&](const TensorView& kvv, const TensorView& gv, const TensorView& bv,
                            const TensorView& o) {
                ops::CompressArgs a{.kv = kvv,
                                    .gate = gv,
                                    .bias = bv,
                                    .buf_kv = slice(o, at_bkv, {k.rate, width}),
                                    .buf_gate = slice(o, at_bgate, {k.rate, width}),
                                    .ovl_kv = {},
                                    .ovl_gate = {},
                                    .out = slice(o, 0, {n_new, k.d}),
                                    .pos0 = pos0,
                                    .rate = k.rate,
                                    .overlap = k.overlap};
                if (k.overlap)
                    a.ovl_kv = slice(o, at_okv, {k.rate, k.d}),
                    a.ovl_gate = slice(o, at_ogate, {k.rate, k.d});
                return a;
            };
            ops::make_ref_backend()->compress(args(kv.view(), gate.view(), bias.v, out.view()));
            const std::vector<float> ref = floats_of(out);
            const Buf kvd = on_device(be, kv), gd = on_device(be, gate), sd = on_device(be, state);
            Tensor y(be.allocator(), DType::kF32, {size});
            const RunFn run = [&](const TensorView& o) {
                be.copy(o, sd.v);  // the state as it was before the chunk
                be.compress(args(kvd.v, gd.v, k.cw->ape, o));
            };
            Compare parts;
            parts.segments = {{0, size_t(n_new * k.d), size_t(k.d), size_t(k.d)},
                              {size_t(at_bkv), size_t(k.rate * width), size_t(width), size_t(width)},
                              {size_t(at_bgate), size_t(k.rate * width), size_t(width), size_t(width)}};
            if (k.overlap)
                parts.segments.insert(parts.segments.end(),
                                      {{size_t(at_okv), size_t(ovl), size_t(k.d), size_t(k.d)},
                                       {size_t(at_ogate), size_t(ovl), size_t(k.d), size_t(k.d)}});
            const std::string shape =
                fmt::format("{}: {} wide, rate {}, {} tokens from {}", k.what, k.d, k.rate, n, pos0);
            for (const ops::KernelVariant* v : cands)
                rows.push_back(
                    judge(be, *v, shape, ref, 2 * k.rate, y.view(), run, TensorView{}, nullptr, parts));
        }
    }
}

}  // namespace

void screen_rowwise(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                    const model::ModelConfig& cfg, const model::ModelWeights& w,
                    const std::vector<int64_t>& batches, std::mt19937_64& rng, std::vector<ScreenRow>& rows,
                    const std::function<bool(const std::string&)>& wanted) {
    auto cands = [&](const char* op) {
        return wanted(op) ? candidates(variants, op) : std::vector<const ops::KernelVariant*>{};
    };
    if (const auto c = cands("rms_norm"); !c.empty()) screen_norms(be, c, cfg, w, batches, rng, rows);
    if (const auto c = cands("rope"); !c.empty()) screen_ropes(be, c, cfg, batches, rng, rows);
    if (const auto c = cands("swiglu"); !c.empty()) screen_swiglu(be, c, cfg, batches, rng, rows);
    if (const auto c = cands("mhc_post"); !c.empty()) screen_mhc_post(be, c, cfg, batches, rng, rows);
    if (const auto c = cands("compress"); !c.empty()) screen_compress(be, c, cfg, w, batches, rng, rows);
}

}  // namespace di::runtime::screen_detail
