#include "runtime/screen.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <span>
#include <thread>
#include <tuple>

#include "model/deepseek_v4.h"
#include "ops/act_quant.h"
#include "ops/ref/ref_backend.h"
#include "runtime/screen_judge.h"

namespace di::runtime {
namespace screen_detail {

// A copy of `src` in memory of `alloc` (declared in screen_judge.h).
Buf copy_of(ops::Backend& be, Allocator& alloc, const TensorView& src) {
    if (!src.is_contiguous()) {  // the whole span, strides kept (a backend's bound weight scales)
        const int64_t bytes = int64_t(src.span_bytes());
        Buf b{Tensor(alloc, DType::kU8, {bytes}), src};
        b.v.data = b.t.view().data;
        b.v.device = alloc.device();
        be.copy(b.t.view(), TensorView::contiguous(src.data, DType::kU8, {bytes}, src.device));
        return b;
    }
    Buf b{Tensor(alloc, src.dtype, {src.numel()}), src};
    b.v.data = b.t.view().data;
    b.v.device = alloc.device();
    be.copy(b.v.reshape({src.numel()}), src.reshape({src.numel()}));
    return b;
}

Buf on_device(ops::Backend& be, const Tensor& h) { return copy_of(be, be.allocator(), h.view()); }

Tensor host_tensor(DType t, std::initializer_list<int64_t> shape) {
    return Tensor(host_allocator(), t, shape);
}

Tensor bf16_streams_of(const Tensor& t) {
    const TensorView v = t.view();
    Tensor out = host_tensor(DType::kBF16, {v.shape[0], v.shape[1], v.shape[2]});
    const int64_t rows = v.shape[0] * v.shape[1];
    ops::make_ref_backend()->cast(
        {.x = v.reshape({rows, v.shape[2]}), .out = out.view().reshape({rows, v.shape[2]})});
    return out;
}

void fill_uniform(Tensor& t, std::mt19937_64& rng, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    float* p = t.view().ptr<float>();
    for (int64_t i = 0; i < t.view().numel(); ++i) p[i] = u(rng);
}

namespace {

using Clock = std::chrono::steady_clock;

// The output's bytes as floats (ids keep their bits).
std::vector<float> to_host_f32(ops::Backend& be, const TensorView& v) {
    Tensor h = host_tensor(v.dtype, {v.numel()});
    be.copy(h.view(), v.reshape({v.numel()}));
    return floats_of(h);
}

void poison(ops::Backend& be, const TensorView& v) {
    Tensor h = host_tensor(v.dtype, {v.numel()});
    std::memset(h.view().data, 0xff, h.view().nbytes());  // NaN: an element the op does not write fails
    be.copy(v.reshape({v.numel()}), h.view());
}

// Relative L2 error; +inf when any element is not finite.
double rel_l2(const std::vector<float>& got, const float* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        const double d = double(got[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

// The worst error of `got` against `ref` under `cmp`.

double median_us(ops::Backend& be, const std::function<void()>& run) {
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
        be.synchronize();
        const auto t0 = Clock::now();
        run();
        be.synchronize();
        t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// The fallbacks, `v` and every variant of the ops in `with_ops`.
void allow_only(ops::Backend& be, const ops::KernelVariant* v, const std::vector<std::string>& with_ops) {
    const std::vector<ops::KernelVariant> all = be.kernel_variants();
    ops::AllowList l = ops::AllowList::fallbacks_of(std::string(be.name()), all);
    if (v) l.allow(v->op, v->name);
    for (const ops::KernelVariant& k : all)
        if (std::find(with_ops.begin(), with_ops.end(), k.op) != with_ops.end()) l.allow(k.op, k.name);
    be.set_allow_list(l);
}

}  // namespace

double error_of(const std::vector<float>& got, const std::vector<float>& ref, const Compare& cmp) {
    if (cmp.exact && cmp.count_bad)
        return double(cmp.count_bad(got, ref)) / double(std::max<size_t>(ref.size(), 1));
    if (cmp.exact) {
        size_t differ = 0;
        for (size_t i = 0; i < ref.size(); ++i)
            differ += std::memcmp(&got[i], &ref[i], sizeof(float)) != 0 &&
                      !(cmp.same && cmp.same(i, got[i], ref[i]));
        return double(differ) / double(std::max<size_t>(ref.size(), 1));
    }
    if (cmp.segments.empty()) return rel_l2(got, ref.data(), ref.size());
    double worst = 0;
    for (const Segment& s : cmp.segments) {
        std::vector<float> g(s.count), r(s.count);
        for (size_t i = 0; i < s.count; ++i) {
            const size_t at = s.first + (i / s.width) * s.period + i % s.width;
            g[i] = got[at], r[i] = ref[at];
        }
        worst = std::max(worst, rel_l2(g, r.data(), s.count));
    }
    return worst;
}

ScreenRow judge(ops::Backend& be, const ops::KernelVariant& v, std::string shape,
                const std::vector<float>& ref, int64_t k_len, const TensorView& y,
                const std::function<void(const TensorView&)>& run, const TensorView& y1,
                const std::function<void(const TensorView&)>& run_one, const Compare& cmp,
                const std::vector<std::string>& with_ops, FallbackRun* fallback) {
    ScreenRow row{v.op, v.name, std::move(shape), "", 0, 0, 0, 0};
    FallbackRun fb;
    if (fallback != nullptr && fallback->done) {
        fb = *fallback;
    } else {
        allow_only(be, nullptr, with_ops);
        poison(be, y);
        run(y);
        fb.error = error_of(to_host_f32(be, y), ref, cmp);
        fb.us = median_us(be, [&] { run(y); });
        fb.done = true;
        if (fallback != nullptr) *fallback = fb;
    }
    const double err_fb = fb.error;
    row.fallback_us = fb.us;
    row.tolerance = cmp.exact ? 0.0
                              : std::max({2 * err_fb, 4 * std::ldexp(1.0, -24) * std::sqrt(double(k_len)),
                                          cmp.floor, v.tolerance});
    allow_only(be, &v, with_ops);
    const int64_t c0 = be.dispatch_count(v.op, v.name);
    poison(be, y);
    run(y);
    be.synchronize();
    if (be.dispatch_count(v.op, v.name) == c0) {
        row.verdict = "skip: not dispatched (the fallback answered)";
        return row;
    }
    const std::vector<float> got = to_host_f32(be, y);
    row.error = error_of(got, ref, cmp);
    if (!(row.error <= row.tolerance)) {
        row.verdict = cmp.exact ? fmt::format("fail: {:.3g} of the ids differ", row.error)
                      : std::isfinite(row.error)
                          ? fmt::format("fail: error {:.3g} above the tolerance", row.error)
                          : "fail: non-finite or unwritten outputs";
        return row;
    }
    if (v.deterministic) {
        poison(be, y);
        run(y);
        const std::vector<float> again = to_host_f32(be, y);
        if (std::memcmp(again.data(), got.data(), got.size() * sizeof(float)) != 0) {
            row.verdict = "fail: two runs differ (claims determinism)";
            return row;
        }
    }
    // The claim is the variant's: row 0 alone runs on it too (forced: a variant that takes only many rows
    // would otherwise leave the row to another kernel, whose bits may differ without breaking the claim).
    bool invariance_checked = false;
    if (v.batch_invariant && run_one) {
        const bool forced = be.force_variant(v.op, v.name);
        const int64_t c1 = be.dispatch_count(v.op, v.name);
        poison(be, y1);
        run_one(y1);
        if (forced) be.force_variant(v.op, "");
        const std::vector<float> alone = to_host_f32(be, y1);
        invariance_checked = be.dispatch_count(v.op, v.name) > c1;
        if (invariance_checked && std::memcmp(alone.data(), got.data(), alone.size() * sizeof(float)) != 0) {
            row.verdict = "fail: row 0 alone differs from its row in the batch (claims batch invariance)";
            return row;
        }
    }
    row.us = median_us(be, [&] { run(y); });
    row.verdict = v.batch_invariant && run_one && !invariance_checked
                      ? "pass (batch invariance not checked: the variant does not run one row)"
                      : "pass";
    return row;
}

}  // namespace screen_detail

using namespace screen_detail;

HostWeight host_weight(ops::Backend& be, const ops::QWeight& w) {
    HostWeight h;
    h.w = w;
    for (TensorView* v : {&h.w.data, &h.w.scale}) {
        if (v->empty() || v->device == Device::kHost) continue;
        Buf b = copy_of(be, host_allocator(), *v);
        *v = b.v;
        h.keep.push_back(std::move(b.t));
    }
    return h;
}

namespace {

// The reference of rows [0, n) in blocks of rows on the host's threads, each on its own reference backend:
// every op screened this way computes a row from that row alone, so the blocks give the one call's bits
// and a prefill-sized case's reference takes seconds instead of minutes.
void reference_rows(int64_t n, const std::function<void(ops::Backend& ref, int64_t r0, int64_t rows)>& fn) {
    const int64_t threads =
        std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(1, n / 8));
    const int64_t per = (n + threads - 1) / threads;
    std::vector<std::thread> pool;
    for (int64_t r0 = 0; r0 < n; r0 += per)
        pool.emplace_back(
            [&fn, r0, rows = std::min(per, n - r0)] { fn(*ops::make_ref_backend(), r0, rows); });
    for (auto& t : pool) t.join();
}

}  // namespace

std::vector<ScreenRow> screen_linear(ops::Backend& be, std::span<const ops::KernelVariant* const> vs,
                                     const ops::QWeight& w, const ops::QWeight& host, int64_t n,
                                     std::mt19937_64& rng, ops::ActQuant act) {
    const int64_t K = w.in_dim, O = w.out_dim;
    Tensor xh = host_tensor(DType::kF32, {n, K});
    fill_uniform(xh, rng, -1, 1);
    Tensor yh = host_tensor(DType::kF32, {n, O});
    reference_rows(n, [&](ops::Backend& ref, int64_t r0, int64_t rows) {
        ref.linear({xh.view().rows(r0, rows), host, yh.view().rows(r0, rows), act});
    });
    const std::vector<float> ref(yh.view().ptr<float>(), yh.view().ptr<float>() + n * O);
    const Buf xd = on_device(be, xh);
    Tensor yd(be.allocator(), DType::kF32, {n, O}), y1(be.allocator(), DType::kF32, {1, O});
    Tensor twin(be.allocator(), DType::kF32, {n, O});
    // As a pair of independent jobs (Backend::linears): a variant that shares launches between the linears
    // of a step (cuda split_rows) runs here as the model runs it, whatever the size of one matrix. The rows
    // as a step's are: row 0 one sequence's (a decode token), the others another's (a prefill chunk).
    const std::vector<int64_t> groups = n > 1 ? std::vector<int64_t>{1, n - 1} : std::vector<int64_t>{};
    auto run = [&](const TensorView& y) {
        const ops::LinearArgs jobs[] = {{xd.v, w, y, act, groups}, {xd.v, w, twin.view(), act, groups}};
        be.linears(jobs);
    };
    auto run_one = [&](const TensorView& y) {
        const ops::LinearArgs jobs[] = {{xd.v.rows(0, 1), w, y, act},
                                        {xd.v.rows(0, 1), w, twin.view().rows(0, 1), act}};
        be.linears(jobs);
    };
    const std::string shape = fmt::format("{} {}x{}, n={}{}", ops::weight_format_name(w), O, K, n,
                                          act != ops::ActQuant::kNone ? ", native" : "");
    std::vector<ScreenRow> rows;
    FallbackRun fb;
    for (const ops::KernelVariant* v : vs)
        rows.push_back(judge(be, *v, shape, ref, K, yd.view(), run, y1.view(),
                             n > 1 ? std::function<void(const TensorView&)>(run_one) : nullptr, {}, {}, &fb));
    return rows;
}

ScreenRow screen_linear(ops::Backend& be, const ops::KernelVariant& v, const ops::QWeight& w,
                        const ops::QWeight& host, int64_t n, std::mt19937_64& rng, ops::ActQuant act) {
    const ops::KernelVariant* one[] = {&v};
    return screen_linear(be, one, w, host, n, rng, act).front();
}

namespace {

// One MoE case (random inputs, distinct experts per token) for each of the variants, against one reference.
std::vector<ScreenRow> screen_moe(ops::Backend& be, std::span<const ops::KernelVariant* const> vs,
                                  const std::vector<ops::ExpertWeights>& experts, int64_t n, int64_t k,
                                  std::mt19937_64& rng, ops::ActQuant act) {
    const int64_t E = int64_t(experts.size()), D = experts[0].w1.in_dim, I = experts[0].w1.out_dim;
    Tensor xh = host_tensor(DType::kF32, {n, D}), wh = host_tensor(DType::kF32, {n, k});
    Tensor idh = host_tensor(DType::kI32, {n, k});
    fill_uniform(xh, rng, -1, 1);
    fill_uniform(wh, rng, 0.1f, 1.0f);
    std::set<int32_t> used;
    for (int64_t t = 0; t < n; ++t) {  // distinct experts per token, as routing gives
        std::vector<int32_t> perm(static_cast<size_t>(E));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int64_t j = 0; j < k; ++j) used.insert(idh.view().ptr<int32_t>()[t * k + j] = perm[size_t(j)]);
    }
    // Host copies of the selected experts only; the others point at one of them (never read).
    std::vector<HostWeight> keep;
    std::vector<ops::ExpertWeights> host(static_cast<size_t>(E));
    for (int32_t e : used) {
        for (const ops::QWeight* q : {&experts[size_t(e)].w1, &experts[size_t(e)].w3, &experts[size_t(e)].w2})
            keep.push_back(host_weight(be, *q));
        host[size_t(e)] = {keep[keep.size() - 3].w, keep[keep.size() - 2].w, keep.back().w};
    }
    for (auto& h : host)
        if (h.w1.empty()) h = host[size_t(*used.begin())];
    Tensor yh = host_tensor(DType::kF32, {n, D});
    const float limit = 10.0f;
    reference_rows(n, [&](ops::Backend& ref, int64_t r0, int64_t rows) {
        ref.moe({xh.view().rows(r0, rows), idh.view().rows(r0, rows), wh.view().rows(r0, rows), host.data(),
                 E, yh.view().rows(r0, rows), limit, act});
    });
    const std::vector<float> ref(yh.view().ptr<float>(), yh.view().ptr<float>() + n * D);
    const Buf xd = on_device(be, xh), wd = on_device(be, wh), idd = on_device(be, idh);
    Tensor yd(be.allocator(), DType::kF32, {n, D}), y1(be.allocator(), DType::kF32, {1, D});
    const std::vector<int64_t> groups = n > 1 ? std::vector<int64_t>{1, n - 1} : std::vector<int64_t>{};
    auto run = [&](const TensorView& y) {  // row 0 one sequence's, the others another's (as screen_linear)
        ops::MoeArgs a{xd.v, idd.v, wd.v, experts.data(), E, y, limit, act};
        a.row_groups = groups;
        be.moe(a);
    };
    auto run_one = [&](const TensorView& y) {
        be.moe({xd.v.rows(0, 1), idd.v.rows(0, 1), wd.v.rows(0, 1), experts.data(), E, y, limit, act});
    };
    const bool native = act != ops::ActQuant::kNone;
    const std::string shape =
        fmt::format("{} {} experts {}x{}, k={}, n={}{}", ops::weight_format_name(experts[0].w1), E, I, D, k,
                    n, native ? ", native" : "");
    Compare cmp;
    cmp.floor = native ? kNativeMoeFloor : 0.0;
    std::vector<ScreenRow> rows;
    FallbackRun fb;
    for (const ops::KernelVariant* v : vs)
        rows.push_back(judge(be, *v, shape, ref, std::max(D, I), yd.view(), run, y1.view(),
                             n > 1 ? std::function<void(const TensorView&)>(run_one) : nullptr, cmp, {},
                             &fb));
    return rows;
}

// Every distinct (format, dtype, out, in) linear weight of the model, in order of first use.
std::vector<const ops::QWeight*> distinct_linears(const model::ModelWeights& w) {
    std::vector<const ops::QWeight*> all;
    for (const model::LayerWeights& l : w.layers) {
        const model::AttentionWeights& a = l.attn;
        for (const ops::QWeight* q :
             {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b, &a.compressor.wkv, &a.compressor.wgate,
              &a.index_compressor.wkv, &a.index_compressor.wgate, &a.index_wq_b, &a.index_weights_proj,
              &l.ffn.gate, &l.ffn.shared.w1, &l.ffn.shared.w3, &l.ffn.shared.w2})
            all.push_back(q);
    }
    all.push_back(&w.head);
    std::set<std::tuple<int, int, int64_t, int64_t>> seen;
    std::vector<const ops::QWeight*> out;
    for (const ops::QWeight* q : all)
        if (!q->empty() && seen.insert({int(q->format), int(q->data.dtype), q->out_dim, q->in_dim}).second)
            out.push_back(q);
    return out;
}

// The linear and MoE cases' row counts: the batches, and a prefill's rows where the prefill variants run.
std::vector<int64_t> rows_of(const ScreenOptions& o, ops::Backend& be) {
    std::vector<int64_t> r = o.batches;
    const int64_t prefill = o.prefill_rows >= 0                        ? o.prefill_rows
                            : be.allocator().device() == Device::kHost ? 0
                                                                       : ScreenOptions::kDevicePrefillRows;
    if (prefill > 0 && std::find(r.begin(), r.end(), prefill) == r.end()) r.push_back(prefill);
    return r;
}

}  // namespace

ops::AllowList allow_list_from(const ops::Backend& be, const std::vector<ScreenRow>& rows) {
    const std::vector<ops::KernelVariant> all = be.kernel_variants();
    ops::AllowList l = ops::AllowList::fallbacks_of(std::string(be.name()), all);
    std::map<std::pair<std::string, std::string>, std::pair<int, int>> tally;  // (passed, failed)
    for (const ScreenRow& r : rows) {
        auto& [pass, fail] = tally[{r.op, r.variant}];
        if (r.passed())
            ++pass;
        else if (r.verdict.rfind("fail", 0) == 0)
            ++fail;
    }
    for (const auto& [key, t] : tally)
        if (t.first > 0 && t.second == 0) l.allow(key.first, key.second);
    return l;
}

Result<ScreenReport> screen_model(model::Model& model, const ScreenOptions& o) {
    auto* v4 = dynamic_cast<model::DeepseekV4*>(&model);
    if (v4 == nullptr)
        return make_error(ErrorCode::kUnsupported, "screen: no screen cases for architecture {} yet",
                          model.config().architecture);
    model::DeepseekV4& m = *v4;
    const auto t0 = Clock::now();
    ops::Backend& be = m.backend();
    ScreenReport rep;
    std::mt19937_64 rng(o.seed);
    const std::vector<ops::KernelVariant> variants = be.kernel_variants();
    auto wanted = [&](const std::string& op) {
        return std::find(o.ops.begin(), o.ops.end(), op) != o.ops.end();
    };
    if (wanted("linear")) {
        const auto linears = distinct_linears(m.weights());
        std::vector<HostWeight> hosts;
        for (const ops::QWeight* q : linears) hosts.push_back(host_weight(be, *q));
        std::vector<const ops::KernelVariant*> lin;
        for (const ops::KernelVariant& v : variants)
            if (v.op == "linear" && !v.fallback) lin.push_back(&v);
        auto add = [&](std::vector<ScreenRow> r) { rep.rows.insert(rep.rows.end(), r.begin(), r.end()); };
        if (!lin.empty())
            for (size_t i = 0; i < linears.size(); ++i)
                for (int64_t n : rows_of(o, be)) {
                    add(screen_linear(be, lin, *linears[i], hosts[i].w, n, rng));
                    const ops::QWeight& q = *linears[i];
                    if (o.native && q.format == ops::WeightFormat::kFp8Block &&
                        q.in_dim % ops::kActBlock == 0)
                        add(screen_linear(be, lin, q, hosts[i].w, n, rng, ops::ActQuant::kFp8Block128));
                }
        screen_table_linears(be, variants, rng, rep.rows);  // the case table's odd sizes
    }
    if (wanted("moe")) {
        const model::LayerWeights* layer = nullptr;
        for (const auto& l : m.weights().layers)
            if (!l.ffn.experts.empty()) layer = &l;
        if (layer) {
            const std::vector<ops::ExpertWeights>& ex = layer->ffn.experts;
            const ops::QWeight& w1 = ex[0].w1;
            const bool native = o.native && w1.format != ops::WeightFormat::kDense &&
                                w1.in_dim % ops::kActBlock == 0 && w1.out_dim % ops::kActBlock == 0;
            const int64_t k = m.config().n_experts_active;
            std::vector<const ops::KernelVariant*> mv;
            for (const ops::KernelVariant& v : variants)
                if (v.op == "moe" && !v.fallback) mv.push_back(&v);
            auto add = [&](std::vector<ScreenRow> r) { rep.rows.insert(rep.rows.end(), r.begin(), r.end()); };
            if (!mv.empty())
                for (int64_t n : rows_of(o, be)) {
                    add(screen_moe(be, mv, ex, n, k, rng, ops::ActQuant::kNone));
                    if (native) add(screen_moe(be, mv, ex, n, k, rng, ops::ActQuant::kFp8Block128));
                }
        }
    }
    if (wanted("attention")) screen_attention(be, variants, m.config(), o.batches, rng, rep.rows, o.native);
    if (wanted("indexer_topk")) screen_indexer(be, variants, m.config(), o.batches, rng, rep.rows, o.native);
    if (wanted("mhc_pre") || wanted("hc_head")) {
        std::vector<ops::KernelVariant> mhc;
        for (const ops::KernelVariant& v : variants)
            if ((v.op == "mhc_pre" || v.op == "hc_head") && wanted(v.op)) mhc.push_back(v);
        screen_mhc(be, mhc, m.config(), m.weights(), o.batches, rng, rep.rows, o.native);
    }
    screen_rowwise(be, variants, m.config(), m.weights(), o.batches, rng, rep.rows, wanted);
    std::vector<ops::KernelVariant> fused;
    for (const ops::KernelVariant& v : variants)
        if (is_fused_pair(v.op) && wanted(v.op)) fused.push_back(v);
    screen_fused(be, fused, m.config(), m.weights(), o.batches, rng, rep.rows);
    be.set_allow_list(ops::AllowList::all_of(std::string(be.name()), variants));  // back to the built-in list
    rep.allow = allow_list_from(be, rep.rows);
    rep.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return rep;
}

std::string ScreenReport::table() const {
    std::string md =
        "| op | variant | shape | result | error | tolerance | us | fallback us | speedup |\n"
        "|---|---|---|---|---:|---:|---:|---:|---:|\n";
    for (const ScreenRow& r : rows)
        md += fmt::format(
            "| {} | {} | {} | {} | {:.2g} | {:.2g} | {:.1f} | {:.1f} | {} |\n", r.op, r.variant, r.shape,
            r.verdict, r.error, r.tolerance, r.us, r.fallback_us,
            r.passed() && r.us > 0 ? fmt::format("{:.2f}x", r.fallback_us / r.us) : std::string("-"));
    return md;
}

}  // namespace di::runtime
