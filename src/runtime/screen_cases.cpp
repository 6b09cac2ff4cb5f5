// Screen cases of the stateful and mHC ops, on the model's own dimensions: attention over the window and
// the compressed entries (each attention type the model has, a short and a long context, chunks of each
// batch size), the indexer's top-k (exact ids), mhc_pre with the model's own mixing weights (x, post and
// comb each within tolerance) and hc_head. Each case's reference is computed once, on host copies and the
// reference backend, before any candidate runs.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include "ops/op_cases.h"
#include "ops/ref/ref_backend.h"
#include "runtime/screen_judge.h"

namespace di::runtime::screen_detail {
namespace {

using RunFn = std::function<void(const TensorView&)>;

// Context lengths (tokens before the chunk) the stateful ops are screened at: short, and long enough that
// the compressed entries outnumber the window, within `max_position_embeddings`.
std::vector<int64_t> contexts(const model::ModelConfig& cfg) {
    std::vector<int64_t> c = {std::min<int64_t>(1024, cfg.max_position_embeddings / 2),
                              std::min<int64_t>(16384, cfg.max_position_embeddings / 2)};
    c.erase(std::unique(c.begin(), c.end()), c.end());
    return c;
}

}  // namespace

std::vector<const ops::KernelVariant*> candidates(const std::vector<ops::KernelVariant>& all,
                                                  std::string_view op) {
    std::vector<const ops::KernelVariant*> v;
    for (const ops::KernelVariant& k : all)
        if (k.op == op && !k.fallback) v.push_back(&k);
    return v;
}

std::vector<float> floats_of(const Tensor& t) {
    std::vector<float> v(size_t(t.view().numel()));
    std::memcpy(v.data(), t.view().data, v.size() * sizeof(float));
    return v;
}

namespace {

// One attention case: `label` names where its shape comes from (the model's attention type, or a case of
// the table).
struct AttnShape {
    std::string label;
    int64_t L, H, hd, window, pos0, n_cached;
    ops::CompMask mask;
    int64_t T, rate, k;  // compressed entries, their rate, picks per query
};

// The case's call on these views (picks: a row for each query of q), f16 the native precision's permission.
ops::AttentionArgs case_args(const AttnShape& c, bool f16, const TensorView& q, const TensorView& ring,
                             const TensorView& kv, const TensorView& comp, const TensorView& picks,
                             const TensorView& sinks, const TensorView& out) {
    ops::AttentionArgs a;
    a.f16 = f16;
    a.q = q, a.ring = ring, a.kv = kv, a.sinks = sinks, a.out = out;
    if (c.mask != ops::CompMask::kNone) a.comp = comp.rows(0, c.T);
    if (c.mask == ops::CompMask::kPicks) a.picks = picks;
    a.pos0 = c.pos0, a.n_cached = c.n_cached, a.window = c.window;
    a.comp_mask = c.mask;
    a.rate = c.rate;
    a.scale = float(1.0 / std::sqrt(double(q.shape[2])));
    return a;
}

// The rotation's inverse frequencies of the layer-tail and decode-batch cases: `half` pairs, base 10,000.
Tensor tail_inv_freq(int64_t half) {
    Tensor inv = host_tensor(DType::kF32, {half});
    for (int64_t i = 0; i < half; ++i)
        inv.view().ptr<float>()[i] = float(std::pow(10000.0, -double(i) / half));
    return inv;
}

// A step's decode queries of one shape in one attentions_stored call, native precision (CUDA runs 8 or more
// together on attention_wgp, fewer on split_kv): 16 jobs, each with its own q and kv row and its own ring to
// store into, the output rotated back, against the reference's default (attend, store, rotate) job by job.
void decode_batch_case(ops::Backend& be, const std::vector<const ops::KernelVariant*>& cands,
                       const AttnShape& c, const std::string& shape, int64_t terms, std::mt19937_64& rng,
                       std::vector<ScreenRow>& rows) {
    constexpr int64_t kJobs = 16;
    const int64_t H = c.H, hd = c.hd, T = std::max<int64_t>(c.T, 1), k = std::max<int64_t>(c.k, 1);
    const int64_t ring_rows = c.window - 1;
    Tensor q = host_tensor(DType::kF32, {kJobs, H, hd}), kv = host_tensor(DType::kF32, {kJobs, hd});
    Tensor ring = host_tensor(DType::kF32, {ring_rows, hd}), entries = host_tensor(DType::kF32, {T, hd});
    Tensor sinks = host_tensor(DType::kF32, {H}), pk = host_tensor(DType::kI32, {kJobs, k});
    Tensor pos = host_tensor(DType::kI32, {kJobs}), inv = tail_inv_freq(std::min<int64_t>(32, hd / 2));
    Tensor out = host_tensor(DType::kF32, {kJobs, H, hd}),
           stores = host_tensor(DType::kF32, {kJobs * ring_rows, hd});
    for (Tensor* t : {&q, &kv, &ring, &entries}) fill_uniform(*t, rng, -1, 1);
    fill_uniform(sinks, rng, -2, 2);
    for (int64_t i = 0; i < kJobs * k; ++i)
        pk.view().ptr<int32_t>()[i] = int32_t(int64_t(rng() % uint64_t(T + 1)) - 1);
    for (int64_t j = 0; j < kJobs; ++j) pos.view().ptr<int32_t>()[j] = int32_t(c.pos0);
    auto call = [&](ops::Backend& b, const TensorView& qv, const TensorView& rv, const TensorView& kvv,
                    const TensorView& cv, const TensorView& pv, const TensorView& sv, const TensorView& ov,
                    const TensorView& store_rings, const TensorView& posv, const TensorView& invv) {
        std::vector<ops::AttentionArgs> jobs;
        std::vector<ops::WindowStoreArgs> st;
        for (int64_t j = 0; j < kJobs; ++j) {
            jobs.push_back(
                case_args(c, true, qv.rows(j, 1), rv, kvv.rows(j, 1), cv, pv.rows(j, 1), sv, ov.rows(j, 1)));
            const ops::AttentionArgs& a = jobs.back();
            st.push_back({.kv = a.kv, .ring = store_rings.rows(j * ring_rows, ring_rows), .pos0 = c.pos0});
        }
        const ops::RopeArgs ro{
            .x = ov, .positions = posv, .inv_freq = invv, .mscale = 1.25f, .inverse = true};
        b.attentions_stored(jobs, st, ro, nullptr, nullptr);
    };
    call(*ops::make_ref_backend(), q.view(), ring.view(), kv.view(), entries.view(), pk.view(), sinks.view(),
         out.view(), stores.view(), pos.view(), inv.view());
    const std::vector<float> ref = floats_of(out);
    const Buf qd = on_device(be, q), rd = on_device(be, ring), kd = on_device(be, kv),
              cd = on_device(be, entries);
    const Buf pd = on_device(be, pk), sd = on_device(be, sinks), posd = on_device(be, pos),
              invd = on_device(be, inv);
    const Buf stores_d = on_device(be, stores);
    Tensor y(be.allocator(), DType::kF32, {kJobs, H, hd}), y1(be.allocator(), DType::kF32, {1, H, hd});
    const RunFn run = [&](const TensorView& o) {
        call(be, qd.v, rd.v, kd.v, cd.v, pd.v, sd.v, o, stores_d.v, posd.v, invd.v);
    };
    Compare cmp;
    cmp.floor = kNativeAttentionFloor;
    for (const ops::KernelVariant* v : cands)
        rows.push_back(judge(be, *v, shape + fmt::format(", native, decode batch of {}", kJobs), ref, terms,
                             y.view(), run, y1.view(), nullptr, cmp));
}

void attention_case(ops::Backend& be, const std::vector<const ops::KernelVariant*>& cands, const AttnShape& c,
                    std::mt19937_64& rng, std::vector<ScreenRow>& rows, bool native) {
    const bool picks = c.mask == ops::CompMask::kPicks;
    const int64_t L = c.L, H = c.H, hd = c.hd, T = std::max<int64_t>(c.T, 1), k = std::max<int64_t>(c.k, 1);
    Tensor q = host_tensor(DType::kF32, {L, H, hd}), ring = host_tensor(DType::kF32, {c.window - 1, hd});
    Tensor kv = host_tensor(DType::kF32, {L, hd}), entries = host_tensor(DType::kF32, {T, hd});
    Tensor sinks = host_tensor(DType::kF32, {H}), pk = host_tensor(DType::kI32, {L, k});
    Tensor out = host_tensor(DType::kF32, {L, H, hd});
    for (Tensor* t : {&q, &ring, &kv, &entries}) fill_uniform(*t, rng, -1, 1);
    fill_uniform(sinks, rng, -2, 2);
    for (int64_t i = 0; i < L * k; ++i)  // -1s and repeats included, as the op allows
        pk.view().ptr<int32_t>()[i] = int32_t(int64_t(rng() % uint64_t(T + 1)) - 1);
    bool f16 = false;  // the native precision's permission (AttentionArgs::f16)
    auto args = [&](const TensorView& qv, const TensorView& rv, const TensorView& kvv, const TensorView& cv,
                    const TensorView& pv, const TensorView& sv,
                    const TensorView& ov) { return case_args(c, f16, qv, rv, kvv, cv, pv, sv, ov); };
    ops::make_ref_backend()->attention(
        args(q.view(), ring.view(), kv.view(), entries.view(), pk.view(), sinks.view(), out.view()));
    const std::vector<float> ref = floats_of(out);
    const Buf qd = on_device(be, q), rd = on_device(be, ring), kd = on_device(be, kv);
    const Buf cd = on_device(be, entries), pd = on_device(be, pk), sd = on_device(be, sinks);
    Tensor y(be.allocator(), DType::kF32, {L, H, hd}), y1(be.allocator(), DType::kF32, {1, H, hd});
    const RunFn run = [&](const TensorView& o) { be.attention(args(qd.v, rd.v, kd.v, cd.v, pd.v, sd.v, o)); };
    const RunFn one = [&](const TensorView& o) {
        be.attention(args(qd.v.rows(0, 1), rd.v, kd.v.rows(0, 1), cd.v, pd.v.rows(0, 1), sd.v, o));
    };
    const std::string shape =
        fmt::format("{} {} x {}, window {}, context {}, {} queries", c.label, H, hd, c.window, c.pos0, L);
    const int64_t terms = std::max(hd, c.window + (picks ? k : T));
    for (const ops::KernelVariant* v : cands)
        rows.push_back(judge(be, *v, shape, ref, terms, y.view(), run, y1.view(), L > 1 ? one : nullptr));
    if (!native) return;
    f16 = true;  // the same reference: f16 operands are a permission, held to kNativeAttentionFloor
    Compare cmp;
    cmp.floor = kNativeAttentionFloor;
    for (const ops::KernelVariant* v : cands)
        rows.push_back(judge(be, *v, shape + ", native", ref, terms, y.view(), run, y1.view(),
                             L > 1 ? one : nullptr, cmp));
    if (L == 1) {
        decode_batch_case(be, cands, c, shape, terms, rng, rows);
        return;
    }
    // A prefill chunk's layer tail as the model hands it over where the backend fuses it
    // (Backend::fuses_attention_tail; CUDA's attention_wgp norms and rotates q where it loads it and rotates
    // the output where it stores it): attentions_stored with a QueryPrep on raw q, against the reference's
    // default (q's norm and rope, the attention, the output's inverse rope). Each run starts from the raw q
    // (a backend may prepare q in place) and stores kv into a ring of its own.
    Tensor pos = host_tensor(DType::kI32, {L}), inv = tail_inv_freq(std::min<int64_t>(32, hd / 2));
    for (int64_t t = 0; t < L; ++t) pos.view().ptr<int32_t>()[t] = int32_t(c.pos0 + t);
    const float mscale = 1.25f, eps = 1e-6f;
    auto tail = [&](ops::Backend& b, const TensorView& qv, const TensorView& rv, const TensorView& kvv,
                    const TensorView& cv, const TensorView& pv, const TensorView& sv, const TensorView& ov,
                    const TensorView& store_ring, const TensorView& posv, const TensorView& invv) {
        const ops::AttentionArgs a = args(qv, rv, kvv, cv, pv, sv, ov);
        const ops::WindowStoreArgs st{.kv = kvv, .ring = store_ring, .pos0 = c.pos0};
        const ops::RopeArgs ro{
            .x = ov, .positions = posv, .inv_freq = invv, .mscale = mscale, .inverse = true};
        const ops::QueryPrep prep{.rope = {.x = qv, .positions = posv, .inv_freq = invv, .mscale = mscale},
                                  .eps = eps};
        b.attentions_stored({&a, 1}, {&st, 1}, ro, &prep, nullptr);
    };
    Tensor q_ref = host_tensor(DType::kF32, {L, H, hd}),
           ring_ref = host_tensor(DType::kF32, {c.window - 1, hd});
    std::memcpy(q_ref.view().data, q.view().data, q.view().nbytes());
    tail(*ops::make_ref_backend(), q_ref.view(), ring.view(), kv.view(), entries.view(), pk.view(),
         sinks.view(), out.view(), ring_ref.view(), pos.view(), inv.view());
    const std::vector<float> tail_ref = floats_of(out);
    const Buf posd = on_device(be, pos), invd = on_device(be, inv), q_work = on_device(be, q),
              ring_work = on_device(be, ring);
    const RunFn run_tail = [&](const TensorView& o) {
        be.copy(q_work.v, qd.v);
        tail(be, q_work.v, rd.v, kd.v, cd.v, pd.v, sd.v, o, ring_work.v, posd.v, invd.v);
    };
    for (const ops::KernelVariant* v : cands)
        rows.push_back(judge(be, *v, shape + ", native, layer tail", tail_ref, terms, y.view(), run_tail,
                             y1.view(), nullptr, cmp));
}

}  // namespace

void screen_attention(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                      const model::ModelConfig& cfg, const std::vector<int64_t>& batches,
                      std::mt19937_64& rng, std::vector<ScreenRow>& rows, bool native) {
    const auto cands = candidates(variants, "attention");
    if (cands.empty()) return;
    const int64_t H = cfg.n_heads, hd = cfg.head_dim, window = cfg.window;
    std::set<int64_t> rates;  // 0: sliding only; CSA and HCA rates of the model's layers
    for (int l = 0; l < int(cfg.n_layers); ++l) rates.insert(cfg.compress_rate(l));
    for (int64_t rate : rates)
        for (int64_t ctx : contexts(cfg))
            for (int64_t L : batches) {
                const bool picks = rate == cfg.csa_rate && rate > 0, causal = rate > 0 && !picks;
                const int64_t T = rate > 0 ? std::max<int64_t>((ctx + L) / rate, 1) : 0;
                attention_case(be, cands,
                               {picks    ? "CSA"
                                : causal ? "HCA"
                                         : "sliding",
                                L, H, hd, window, ctx, std::min(ctx, window - 1),
                                picks    ? ops::CompMask::kPicks
                                : causal ? ops::CompMask::kCausal
                                         : ops::CompMask::kNone,
                                T, rate > 0 ? rate : 1, picks ? std::min(cfg.index_topk, T) : 0},
                               rng, rows, native);
            }
    // the case table's odd shapes (ops/op_cases.h, kScreen), with the picks drawn here
    for (const ops::cases::AttentionCase& c : ops::cases::attention_cases(ops::cases::kScreen))
        attention_case(be, cands,
                       {fmt::format("case {}:", c.name), c.L, c.H, c.hd, c.window, c.pos0, c.n_cached, c.mask,
                        c.T, c.rate, c.n_picks},
                       rng, rows, native);
}

size_t indexer_f16_bad(const std::vector<int32_t>& got, const std::vector<int32_t>& ref, int64_t L, int64_t k,
                       const std::function<double(int64_t, int64_t, double&)>& score) {
    size_t bad = 0;
    for (int64_t t = 0; t < L; ++t) {
        std::set<int32_t> g, r;
        for (int64_t i = 0; i < k; ++i) {
            if (got[size_t(t * k + i)] >= 0) g.insert(got[size_t(t * k + i)]);
            if (ref[size_t(t * k + i)] >= 0) r.insert(ref[size_t(t * k + i)]);
        }
        if (g.size() != r.size()) {
            bad += size_t(k);
            continue;
        }
        double worst_in = INFINITY, best_out = -INFINITY,
               bound = 0;  // min (s + E) in only here, max (s - E) out
        size_t moved = 0;
        for (int32_t e : g)
            if (!r.count(e)) worst_in = std::min(worst_in, score(t, e, bound) + bound), ++moved;
        for (int32_t e : r)
            if (!g.count(e)) best_out = std::max(best_out, score(t, e, bound) - bound);
        if (best_out > worst_in) bad += moved;
        for (int64_t i = 0; i + 1 < int64_t(g.size()); ++i) {  // the order, best first
            double b0 = 0, b1 = 0;
            const double s0 = score(t, got[size_t(t * k + i)], b0),
                         s1 = score(t, got[size_t(t * k + i + 1)], b1);
            bad += s1 - b1 > s0 + b0;
        }
    }
    return bad;
}

Compare indexer_f16_compare(int64_t k, std::function<double(int64_t, int64_t, double&)> score) {
    Compare c;
    c.exact = true;
    c.count_bad = [k, score = std::move(score)](const std::vector<float>& got,
                                                const std::vector<float>& want) {
        std::vector<int32_t> g(got.size()), r(want.size());
        for (size_t i = 0; i < got.size(); ++i) g[i] = std::bit_cast<int32_t>(got[i]);
        for (size_t i = 0; i < want.size(); ++i) r[i] = std::bit_cast<int32_t>(want[i]);
        return indexer_f16_bad(g, r, int64_t(want.size()) / k, k, score);
    };
    return c;
}

void screen_indexer(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                    const model::ModelConfig& cfg, const std::vector<int64_t>& batches, std::mt19937_64& rng,
                    std::vector<ScreenRow>& rows, bool native) {
    const auto cands = candidates(variants, "indexer_topk");
    if (cands.empty() || cfg.index_topk <= 0 || cfg.index_heads <= 0) return;
    const int64_t nH = cfg.index_heads, dim = cfg.index_dim, rate = cfg.csa_rate;
    for (int64_t ctx : contexts(cfg))
        for (int64_t L : batches) {
            const int64_t T = std::max<int64_t>((ctx + L) / rate, 1), k = std::min(cfg.index_topk, T);
            Tensor q = host_tensor(DType::kF32, {L, nH, dim}), w = host_tensor(DType::kF32, {L, nH});
            Tensor keys = host_tensor(DType::kF32, {T, dim}), picks = host_tensor(DType::kI32, {L, k});
            for (Tensor* t : {&q, &w, &keys}) fill_uniform(*t, rng, -1, 1);
            bool f16 = false;  // the native precision's permission
            const float ws = float(1.0 / std::sqrt(double(nH))), ss = float(1.0 / std::sqrt(double(dim)));
            auto args = [&](const TensorView& qv, const TensorView& wv, const TensorView& kv,
                            const TensorView& pv) {
                ops::IndexerTopkArgs a{qv, wv, kv, pv, ctx, rate, ws, ss};
                a.f16 = f16;
                return a;
            };
            ops::make_ref_backend()->indexer_topk(args(q.view(), w.view(), keys.view(), picks.view()));
            const std::vector<float> ref = floats_of(picks);  // the ids' bits
            const Buf qd = on_device(be, q), wd = on_device(be, w), kd = on_device(be, keys);
            Tensor y(be.allocator(), DType::kI32, {L, k}), y1(be.allocator(), DType::kI32, {1, k});
            const RunFn run = [&](const TensorView& o) { be.indexer_topk(args(qd.v, wd.v, kd.v, o)); };
            const RunFn one = [&](const TensorView& o) {
                be.indexer_topk(args(qd.v.rows(0, 1), wd.v.rows(0, 1), kd.v, o));
            };
            const std::string shape =
                fmt::format("{} x {}, {} entries, top-{}, {} queries", nH, dim, T, k, L);
            // Query t's double score of entry e, and the f16 permission's bound on its error: f16 q and keys
            // put each dot within (2 * 2^-11 + 2^-22 + dim * 2^-24) sum_j |q_j k_j| (9.8e-4 at dim 128, taken
            // as 1.1e-3 there as the op test does), kept by relu and summed over the heads with their weights
            const float* qh = q.view().ptr<float>();
            const float* kh = keys.view().ptr<float>();
            const float* wh = w.view().ptr<float>();
            const double per = std::max(1.1e-3, 2 * 0x1p-11 + 0x1p-22 + double(dim) * 0x1p-24);
            const auto score = [&](int64_t t, int64_t e, double& bound) {
                double sum = 0;
                bound = 0;
                for (int64_t h = 0; h < nH; ++h) {
                    double dot = 0, mag = 0;
                    for (int64_t j = 0; j < dim; ++j) {
                        const double x = double(qh[(t * nH + h) * dim + j]) * kh[e * dim + j];
                        dot += x, mag += std::abs(x);
                    }
                    sum += std::max(dot, 0.0) * ss * wh[t * nH + h] * ws;
                    bound += per * mag * ss * std::abs(wh[t * nH + h]) * ws;
                }
                bound += 1e-6 * std::abs(sum);
                return sum;
            };
            Compare exact;
            exact.exact = true;
            // as the op tests (tests/gpu/cuda_attention_test.cpp): a pick may differ from ref's only where
            // the two entries' double scores are within 1e-5 relative, a near-tie that f32 and double sums
            // can order either way
            exact.same = [&](size_t i, float got_bits, float want_bits) {
                const int32_t a = std::bit_cast<int32_t>(got_bits), b = std::bit_cast<int32_t>(want_bits);
                if (a < 0 || b < 0 || a >= T || b >= T) return false;
                double unused = 0;
                const double sa = score(int64_t(i) / k, a, unused), sb = score(int64_t(i) / k, b, unused);
                return std::abs(sa - sb) <= 1e-5 * std::max(std::abs(sa), std::abs(sb));
            };
            for (const ops::KernelVariant* v : cands)
                rows.push_back(
                    judge(be, *v, shape, ref, dim, y.view(), run, y1.view(), L > 1 ? one : nullptr, exact));
            if (!native) continue;
            f16 = true;
            for (const ops::KernelVariant* v : cands)
                rows.push_back(judge(be, *v, shape + ", native", ref, dim, y.view(), run, y1.view(),
                                     L > 1 ? one : nullptr, indexer_f16_compare(k, score)));
        }
}

void screen_mhc(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                const model::ModelConfig& cfg, const model::ModelWeights& w,
                const std::vector<int64_t>& batches, std::mt19937_64& rng, std::vector<ScreenRow>& rows,
                bool native) {
    const int64_t hc = cfg.hc_mult, D = cfg.hidden_dim;
    const float eps = float(cfg.rms_norm_eps), hc_eps = float(cfg.hc_eps);
    auto host = [&](const TensorView& v, std::vector<Buf>& keep) {
        keep.push_back(copy_of(be, host_allocator(), v));
        return keep.back().v;
    };
    std::vector<Buf> keep;
    const auto pre_cands = candidates(variants, "mhc_pre"), head_cands = candidates(variants, "hc_head");
    if (!w.layers.empty() && !pre_cands.empty()) {
        const model::HcWeights& hw = w.layers[0].hc_attn;
        const TensorView fn = host(hw.fn, keep), base = host(hw.base, keep), scale = host(hw.scale, keep);
        const int64_t W = D + hc + hc * hc;  // one output row: x, post, comb side by side
        bool tf32 = false;                   // the native precision's permission (MhcPreArgs::tf32)
        // views of x, post and comb in the rows of `o` ([n, W])
        auto args = [&](const TensorView& st, const TensorView& f, const TensorView& b, const TensorView& sc,
                        const TensorView& o) {
            const int64_t n = o.shape[0];
            auto part = [&](int64_t col, std::initializer_list<int64_t> shape) {
                TensorView v = TensorView::contiguous(o.ptr<float>() + col, DType::kF32, shape, o.device);
                v.stride[0] = W;
                return v;
            };
            return ops::MhcPreArgs{st,
                                   f,
                                   b,
                                   sc,
                                   part(0, {n, D}),
                                   part(D, {n, hc}),
                                   part(D + hc, {n, hc, hc}),
                                   eps,
                                   hc_eps,
                                   int(cfg.hc_sinkhorn_iters),
                                   tf32};
        };
        std::vector<std::pair<int64_t, bool>> shapes;  // (tokens, TF32 permission)
        for (int64_t n : batches) shapes.emplace_back(n, false);
        if (native) shapes.emplace_back(kNativeMhcRows, true);
        for (const auto& [n, perm] : shapes) {
            tf32 = perm;
            Tensor st = host_tensor(DType::kF32, {n, hc, D}), out = host_tensor(DType::kF32, {n, W});
            fill_uniform(st, rng, -1, 1);
            ops::make_ref_backend()->mhc_pre(args(st.view(), fn, base, scale, out.view()));
            const std::vector<float> ref = floats_of(out);
            const Buf sd = on_device(be, st);
            Tensor y(be.allocator(), DType::kF32, {n, W}), y1(be.allocator(), DType::kF32, {1, W});
            const RunFn run = [&](const TensorView& o) {
                be.mhc_pre(args(sd.v, hw.fn, hw.base, hw.scale, o));
            };
            const RunFn one = [&](const TensorView& o) {
                be.mhc_pre(args(sd.v.rows(0, 1), hw.fn, hw.base, hw.scale, o));
            };
            Compare parts;  // x, post and comb each within the tolerance (x's norm would hide the others)
            parts.segments = {{0, size_t(n * D), size_t(D), size_t(W)},
                              {size_t(D), size_t(n * hc), size_t(hc), size_t(W)},
                              {size_t(D + hc), size_t(n * hc * hc), size_t(hc * hc), size_t(W)}};
            const std::string shape = fmt::format("hc {} x {}, n={}{}", hc, D, n, tf32 ? ", native" : "");
            // the same reference: TF32 inputs are a permission; no row-0-alone check on it (a row alone takes
            // the exact sums, so native mHC is batch-invariant only within a prefill's size: docs/kernels.md)
            if (tf32) parts.floor = kNativeMhcFloor;
            for (const ops::KernelVariant* v : pre_cands)
                rows.push_back(judge(be, *v, shape, ref, hc * D, y.view(), run, y1.view(),
                                     n > 1 && !tf32 ? one : nullptr, parts));
        }
    }
    if (!head_cands.empty()) {
        const TensorView fn = host(w.hc_head.fn, keep), base = host(w.hc_head.base, keep),
                         scale = host(w.hc_head.scale, keep);
        for (int64_t n : batches) {
            Tensor st = host_tensor(DType::kF32, {n, hc, D}), out = host_tensor(DType::kF32, {n, D});
            fill_uniform(st, rng, -1, 1);
            ops::make_ref_backend()->hc_head({st.view(), fn, base, scale, out.view(), eps, hc_eps});
            const std::vector<float> ref = floats_of(out);
            const Buf sd = on_device(be, st);
            Tensor y(be.allocator(), DType::kF32, {n, D}), y1(be.allocator(), DType::kF32, {1, D});
            const RunFn run = [&](const TensorView& o) {
                be.hc_head({sd.v, w.hc_head.fn, w.hc_head.base, w.hc_head.scale, o, eps, hc_eps});
            };
            const RunFn one = [&](const TensorView& o) {
                be.hc_head({sd.v.rows(0, 1), w.hc_head.fn, w.hc_head.base, w.hc_head.scale, o, eps, hc_eps});
            };
            const std::string shape = fmt::format("hc {} x {}, n={}", hc, D, n);
            for (const ops::KernelVariant* v : head_cands)
                rows.push_back(
                    judge(be, *v, shape, ref, hc * D, y.view(), run, y1.view(), n > 1 ? one : nullptr));
        }
    }
}

}  // namespace di::runtime::screen_detail
