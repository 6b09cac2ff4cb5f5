// CudaBackend's ops on per-sequence state (compress, indexer_topk, attention, window_store), one call or the
// step's sequences at once: check(args) first, then the device check, then the launch with plain params.
#include <algorithm>

#include "ops/cuda/attention_decode.h"
#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/env_switch.h"

namespace di::ops::cuda_impl {
namespace {

static_assert(int(CompMask::kNone) == int(cuda::AttnCompMask::kNone) &&
              int(CompMask::kCausal) == int(cuda::AttnCompMask::kCausal) &&
              int(CompMask::kPicks) == int(cuda::AttnCompMask::kPicks));

// Dispatch preference order, the fallback last (the names in CudaBackend's constructor, cuda_ops.cpp).
constexpr cuda::IndexerVariant kIndexerEnum[] = {cuda::IndexerVariant::kMma, cuda::IndexerVariant::kTiled,
                                                 cuda::IndexerVariant::kWarpHeads,
                                                 cuda::IndexerVariant::kBlock};
// tiled against warp_heads on the H200 (one query, 64 heads x 128): 5 entries 11.0 us / 9.9, 4,096 entries
// 29.5 / 35.1, 16,384 entries 52.6 / 83.6, 16 queries of 16,384 each 215 / 692.
constexpr int64_t kIndexerTiledMinEntries = 256;
// mma against tiled on the H200, 4,096 queries from position 0 over 1,024 entries: 733 us / 2,800.
constexpr int64_t kIndexerMmaMinQueries = 16;
constexpr cuda::AttentionVariant kAttentionEnum[] = {  // mma64 first: attentions_stored's decode batches
    cuda::AttentionVariant::kMma64, cuda::AttentionVariant::kMma, cuda::AttentionVariant::kSplitKv,
    cuda::AttentionVariant::kPerQuery};

}  // namespace

cuda::CompressParams CudaBackend::compress_params(const CompressArgs& a) {
    check(a);
    device_args(a, "compress");
    for (const TensorView* v :
         {&a.kv, &a.gate, &a.bias, &a.buf_kv, &a.buf_gate, &a.ovl_kv, &a.ovl_gate, &a.out})
        need_f32_rows(*v, "compress");
    return {.kv = f32(a.kv),
            .ld_kv = ld(a.kv),
            .gate = f32(a.gate),
            .ld_gate = ld(a.gate),
            .bias = f32(a.bias),
            .ld_bias = ld(a.bias),
            .buf_kv = f32m(a.buf_kv),
            .ld_buf_kv = ld(a.buf_kv),
            .buf_gate = f32m(a.buf_gate),
            .ld_buf_gate = ld(a.buf_gate),
            .ovl_kv = a.overlap ? f32m(a.ovl_kv) : nullptr,
            .ld_ovl_kv = ld(a.ovl_kv),
            .ovl_gate = a.overlap ? f32m(a.ovl_gate) : nullptr,
            .ld_ovl_gate = ld(a.ovl_gate),
            .out = a.out.empty() ? nullptr : f32m(a.out),
            .ld_out = ld(a.out),
            .L = a.kv.shape[0],
            .width = a.kv.shape[1],
            .d = a.out.shape[1],
            .n_new = a.out.shape[0],
            .pos0 = a.pos0,
            .rate = a.rate,
            .overlap = a.overlap};
}

void CudaBackend::compress(const CompressArgs& a) { compresses({&a, 1}); }

void CudaBackend::compresses(std::span<const CompressArgs> jobs) {
    if (replaying() || jobs.empty()) return;
    std::vector<cuda::CompressParams> ps;
    for (const CompressArgs& a : jobs) ps.push_back(compress_params(a));
    cuda::launch_compresses(ps.data(), int64_t(ps.size()), scratch_, stream_);
    launched("compress");
}

// The checked kernel parameters of one indexer call and the variant dispatch gives it.
std::pair<cuda::IndexerParams, int> CudaBackend::indexer_call(const IndexerTopkArgs& a) {
    check(a);
    device_args(a, "indexer_topk");
    need_f32_rows(a.q, "indexer.q"), need_f32_rows(a.weights, "indexer.weights"),
        need_f32_rows(a.keys, "indexer.keys");
    DI_CHECK(a.picks.shape[1] <= cuda::indexer_max_topk(), "indexer_topk: k {} above the kernel's {}",
             a.picks.shape[1], cuda::indexer_max_topk());
    cuda::IndexerParams p{.q = f32(a.q),
                          .q_s0 = a.q.stride[0],
                          .q_s1 = a.q.stride[1],
                          .w = f32(a.weights),
                          .ld_w = ld(a.weights),
                          .keys = f32(a.keys),
                          .ld_keys = ld(a.keys),
                          .picks = a.picks.ptr<int32_t>(),
                          .ld_picks = ld(a.picks),
                          .L = a.q.shape[0],
                          .H = a.q.shape[1],
                          .dim = a.q.shape[2],
                          .T = a.keys.shape[0],
                          .k = a.picks.shape[1],
                          .pos0 = a.pos0,
                          .rate = a.rate,
                          .weight_scale = a.weight_scale,
                          .score_scale = a.score_scale,
                          .f16 = a.f16};
    const int v = indexer_v_.choose(
        [&](int i, bool forced) {
            switch (kIndexerEnum[i]) {
                case cuda::IndexerVariant::kMma:  // prefill chunks (3.8x tiled there); decode not yet
                                                  // measured
                    return cuda::indexer_mma_supported(p) && (forced || p.L >= kIndexerMmaMinQueries);
                case cuda::IndexerVariant::kTiled:  // forced: any T; else where its 64-entry blocks fill
                    return cuda::indexer_tiled_supported(p) && (forced || p.T >= kIndexerTiledMinEntries);
                case cuda::IndexerVariant::kWarpHeads:
                    return cuda::indexer_warp_supported(p);
                default:
                    return true;
            }
        },
        [&] { return fmt::format("dim {}: rows not float4-aligned or dim above 512", p.dim); });
    return {p, v};
}

void CudaBackend::indexer_topk(const IndexerTopkArgs& a) { indexer_topks({&a, 1}); }

// The calls tiled takes in one batched launch pair, those warp_heads takes in another; the rest one by one.
void CudaBackend::indexer_topks(std::span<const IndexerTopkArgs> jobs) {
    if (replaying()) return;
    std::vector<cuda::IndexerParams> tiled, warp;
    for (const IndexerTopkArgs& a : jobs) {
        const auto [p, v] = indexer_call(a);
        if (kIndexerEnum[v] == cuda::IndexerVariant::kTiled) {
            tiled.push_back(p);
        } else if (kIndexerEnum[v] == cuda::IndexerVariant::kWarpHeads) {
            warp.push_back(p);
        } else {
            cuda::launch_indexer_topk(p, scratch_, stream_, kIndexerEnum[v]);
            launched("indexer_topk");
        }
    }
    for (auto [batch, v] : {std::pair{&tiled, cuda::IndexerVariant::kTiled},
                            std::pair{&warp, cuda::IndexerVariant::kWarpHeads}}) {
        if (batch->empty()) continue;
        cuda::launch_indexer_topks(batch->data(), int64_t(batch->size()), scratch_, stream_, v);
        launched("indexer_topk");
    }
}

// The checked kernel parameters of one attention call and the variant dispatch gives it.
std::pair<cuda::AttentionParams, int> CudaBackend::attention_call(const AttentionArgs& a) {
    check(a);
    device_args(a, "attention");
    need_f32_rows(a.q, "attention.q"), need_f32_rows(a.out, "attention.out"),
        need_f32_rows(a.kv, "attention.kv");
    need_f32_rows(a.ring, "attention.ring");
    DI_CHECK(a.q.shape[2] <= cuda::attention_max_head_dim(), "attention: head_dim {} above the kernel's {}",
             a.q.shape[2], cuda::attention_max_head_dim());
    const bool comp = a.comp_mask != CompMask::kNone;
    const bool picks = a.comp_mask == CompMask::kPicks;
    cuda::AttentionParams p{.q = f32(a.q),
                            .q_s0 = a.q.stride[0],
                            .q_s1 = a.q.stride[1],
                            .ring = f32(a.ring),
                            .ld_ring = ld(a.ring),
                            .kv = f32(a.kv),
                            .ld_kv = ld(a.kv),
                            .comp = comp ? f32(a.comp) : nullptr,
                            .ld_comp = comp ? ld(a.comp) : 0,
                            .n_comp = comp && !a.comp.empty() ? a.comp.shape[0] : 0,
                            .picks = picks ? a.picks.ptr<int32_t>() : nullptr,
                            .ld_picks = picks ? ld(a.picks) : 0,
                            .k = picks ? a.picks.shape[1] : 0,
                            .sinks = f32(a.sinks),
                            .out = f32m(a.out),
                            .o_s0 = a.out.stride[0],
                            .o_s1 = a.out.stride[1],
                            .L = a.q.shape[0],
                            .H = a.q.shape[1],
                            .hd = a.q.shape[2],
                            .pos0 = a.pos0,
                            .n_cached = a.n_cached,
                            .window = a.window,
                            .comp_mask = cuda::AttnCompMask(int(a.comp_mask)),
                            .rate = a.rate,
                            .scale = a.scale,
                            .f16 = a.f16};
    const int v = attention_v_.choose(
        [&](int i, bool forced) {
            switch (kAttentionEnum[i]) {
                case cuda::AttentionVariant::kMma64:
                    return cuda::attention_mma64_supported(p) &&
                           (forced || p.L >= cuda::kAttentionMmaMinQueries);
                case cuda::AttentionVariant::kMma:
                    return cuda::attention_mma_supported(p) &&
                           (forced || p.L >= cuda::kAttentionMmaMinQueries);
                case cuda::AttentionVariant::kSplitKv:
                    return cuda::attention_split_supported(p);
                default:
                    return true;
            }
        },
        [&] { return fmt::format("head_dim {}, key rows not 16-byte aligned or head_dim % 4 != 0", p.hd); });
    return {p, v};
}

void CudaBackend::attention(const AttentionArgs& a) {
    if (replaying()) return;
    const auto [p, v] = attention_call(a);
    cuda::launch_attention(p, scratch_, stream_, kAttentionEnum[v]);
    launched("attention");
}

// The decode queries split_kv takes (one query, one head_dim) in one batched launch pair; the rest one by
// one.
void CudaBackend::attentions(std::span<const AttentionArgs> jobs) {
    if (replaying()) return;
    std::vector<cuda::AttentionParams> batch;
    for (const AttentionArgs& a : jobs) {
        const auto [p, v] = attention_call(a);
        if (kAttentionEnum[v] == cuda::AttentionVariant::kSplitKv && cuda::attention_batch_takes(p) &&
            (batch.empty() || batch[0].hd == p.hd)) {
            batch.push_back(p);
            continue;
        }
        cuda::launch_attention(p, scratch_, stream_, kAttentionEnum[v]);
        launched("attention");
    }
    cuda::launch_attention_batch(batch.data(), int64_t(batch.size()), scratch_, stream_);
    if (!batch.empty()) launched("attention");
}

void CudaBackend::window_store(const WindowStoreArgs& a) { window_stores({&a, 1}); }

void CudaBackend::window_stores(std::span<const WindowStoreArgs> jobs) {
    if (replaying()) return;
    std::vector<cuda::WindowStoreJob> js;
    for (const WindowStoreArgs& a : jobs) {
        check(a);
        device_args(a, "window_store");
        need_f32_rows(a.kv, "window_store.kv"), need_f32_rows(a.ring, "window_store.ring");
        js.push_back({f32(a.kv), ld(a.kv), a.kv.shape[0], a.kv.shape[1], f32m(a.ring), ld(a.ring),
                      a.ring.shape[0], a.pos0});
    }
    cuda::launch_window_stores(js.data(), int64_t(js.size()), scratch_, stream_);
    if (!js.empty()) launched("window_store");
}

namespace {

// DEEPINFER_ATTN_TAIL_FUSED=0 runs attentions_stored's three parts (A/B timing of the fusion).
bool attention_tail_fused_enabled() {
    static const bool on = cuda::env_switch("DEEPINFER_ATTN_TAIL_FUSED", true);
    return on;
}

// The first row of `out` in the rows of x ([n, H, hd]: out is rows r0 .. of it with x's strides), -1 if it
// is not such rows.
int64_t rows_within(const TensorView& out, const TensorView& x) {
    if (out.ndim != 3 || x.ndim != 3 || out.dtype != x.dtype || out.shape[1] != x.shape[1] ||
        out.shape[2] != x.shape[2] || out.stride[0] != x.stride[0] || out.stride[1] != x.stride[1] ||
        out.stride[2] != 1 || x.stride[2] != 1)
        return -1;
    const ptrdiff_t at = static_cast<const float*>(out.data) - static_cast<const float*>(x.data);
    if (at < 0 || at % x.stride[0] != 0) return -1;
    const int64_t r0 = int64_t(at / x.stride[0]);
    return r0 + out.shape[0] <= x.shape[0] ? r0 : -1;
}

}  // namespace

// DEEPINFER_ATTN_QPREP=0 keeps q's norm and rotation in their own launch (A/B timing of the fused prologue).
bool query_prep_fused_enabled() {
    static const bool on = cuda::env_switch("DEEPINFER_ATTN_QPREP", true);
    return on;
}

// The native model's queries in bf16 (wq_b writes them so, attention_wgp reads them where it prepares them):
// DEEPINFER_BF16_QUERIES=0 keeps them in f32 (A/B timing).
bool CudaBackend::bf16_queries() const {
    static const bool on = cuda::env_switch("DEEPINFER_BF16_QUERIES", true);
    return on;
}

bool CudaBackend::fuses_attention_tail(std::span<const int64_t> chunk_queries, int64_t n_heads,
                                       int64_t head_dim, bool f16) const {
    if (!query_prep_fused_enabled() || !attention_tail_fused_enabled()) return false;
    cuda::AttentionParams p{};  // the shape attention_mma64_takes_tail looks at; aligned workspace rows
    p.H = n_heads, p.hd = head_dim, p.f16 = f16;
    p.comp_mask = cuda::AttnCompMask::kPicks, p.k = 512;  // the largest picks list V4 takes
    bool any = false;
    for (const int64_t L : chunk_queries) {
        if (L == 0) continue;
        if (L < cuda::kAttentionMmaMinQueries || !cuda::attention_mma64_takes_tail(p)) return false;
        any = true;
    }
    return any;
}

// Decode jobs on split_kv store their kv rows and rotate their output in the merge kernel (the bits of
// window_store and rope: same copies, same products); prefill jobs on attention_wgp rotate (and quantise)
// their output where they store it and prepare their queries where they load them; every other job runs the
// parts.
void CudaBackend::attentions_stored(std::span<const AttentionArgs> jobs,
                                    std::span<const WindowStoreArgs> stores, const RopeArgs& out_rope,
                                    const QueryPrep* q_prep, const ActQuantArgs* out_quant) {
    if (replaying()) return;
    check(out_rope);
    device_args(out_rope, "rope");
    if (q_prep != nullptr) check(*q_prep), device_args(q_prep->rope, "rope");
    if (out_quant != nullptr) {
        check(*out_quant);
        device_args(*out_quant, "act_quant");
        DI_CHECK(out_quant->x.data == out_rope.x.data && out_quant->x.numel() == out_rope.x.numel(),
                 "attentions_stored: out_quant.x {} is not the output {}", out_quant->x.describe(),
                 out_rope.x.describe());
    }
    const TensorView& x = out_rope.x;
    const int64_t half = out_rope.inv_freq.numel();
    // the rotation as the jobs' rows: each job's out is rows r0[i] .. of x (and its q rows rq[i] .. of q's)
    bool tail = attention_tail_fused_enabled() && stores.size() == jobs.size() && x.dtype == DType::kF32 &&
                x.shape[2] % 2 == 0 && 2 * half <= x.shape[2] && out_rope.positions.is_contiguous() &&
                out_rope.inv_freq.is_contiguous();
    std::vector<int64_t> r0(jobs.size(), -1), rq(jobs.size(), -1);
    int64_t covered = 0;  // rows of x the jobs write: all of them, or the rotation runs whole
    for (size_t i = 0; tail && i < jobs.size(); ++i) {
        check(stores[i]);
        device_args(stores[i], "window_store");
        r0[i] = rows_within(jobs[i].out, x);
        if (q_prep != nullptr) rq[i] = rows_within(jobs[i].q, q_prep->rope.x);
        tail = r0[i] >= 0;
        covered += jobs[i].out.shape[0];
    }
    tail = tail && covered == x.shape[0];
    // q's rows by job, or prepared whole here
    const bool by_job =
        q_prep != nullptr && std::all_of(rq.begin(), rq.end(), [](int64_t r) { return r >= 0; });
    if (q_prep != nullptr && (!tail || !by_job)) prepare_queries(*q_prep), q_prep = nullptr;
    if (!tail) {
        attentions(jobs);
        window_stores(stores);
        rope(out_rope);
        if (out_quant != nullptr) act_quant(*out_quant);
        return;
    }
    // the output's codes and scales written where attention_wgp stores it (act_quant's layout)
    const bool oq_fusable = out_quant != nullptr && out_quant->q.stride[0] == out_quant->x.shape[1] &&
                            out_quant->scales.stride[0] == 1;
    const bool qp_fusable = q_prep != nullptr && query_prep_fused_enabled() &&
                            q_prep->rope.x.dtype == DType::kF32 && q_prep->rope.positions.is_contiguous() &&
                            q_prep->rope.inv_freq.is_contiguous();
    // the output rotated where job i's kernel stores it (rope's products)
    const auto rotate_out = [&](cuda::AttentionParams& p, size_t i) {
        p.rope_pos = out_rope.positions.ptr<int32_t>() + r0[i];
        p.rope_inv_freq = f32(out_rope.inv_freq);
        p.rope_half = half;
        p.rope_mscale = out_rope.mscale;
        p.rope_inverse = out_rope.inverse;
    };
    std::vector<std::pair<cuda::AttentionParams, int>> calls;
    std::vector<CastArgs> rest_casts;     // their rows from q_prep's src
    std::vector<RmsNormArgs> rest_norms;  // the queries of jobs whose kernel does not prepare them
    std::vector<RopeArgs> rest_q;
    for (size_t i = 0; i < jobs.size(); ++i) {
        auto [p, v] = attention_call(jobs[i]);
        bool prepared = false;
        if (kAttentionEnum[v] == cuda::AttentionVariant::kMma64) {
            cuda::AttentionParams f = p;  // the output's rotation, and the queries' preparation
            rotate_out(f, i);
            const TensorView src = q_prep != nullptr ? q_prep->src : TensorView{};
            const TensorView& qi = jobs[i].q;
            if (qp_fusable &&
                (src.empty() || (qi.stride[0] == src.stride[0] && qi.stride[1] == src.stride[1]))) {
                const RopeArgs& qr = q_prep->rope;
                if (!src.empty()) f.qb = src.ptr<uint16_t>() + rq[i] * src.stride[0];  // read instead of q
                f.qp_pos = qr.positions.ptr<int32_t>() + rq[i];
                f.qp_inv_freq = f32(qr.inv_freq);
                f.qp_half = qr.inv_freq.numel();
                f.qp_mscale = qr.mscale;
                f.qp_eps = q_prep->eps;
                f.qp_inverse = qr.inverse;
            }
            if (oq_fusable) {
                f.oq = out_quant->q.ptr<uint8_t>() + r0[i] * out_quant->q.stride[0];
                f.ld_oq = out_quant->q.stride[0];
                f.osx = f32m(out_quant->scales) + r0[i];
                f.ld_osx = out_quant->scales.stride[1];
            }
            if (cuda::attention_mma64_takes_tail(f)) p = f, prepared = f.qp_pos != nullptr;
        }
        if (q_prep != nullptr && !prepared) {
            const TensorView& q = jobs[i].q;
            if (!q_prep->src.empty())  // its rows as the linear stored them, into q first
                rest_casts.push_back(
                    {.x = q_prep->src.rows(rq[i], q.shape[0]).reshape({q.shape[0], q.shape[1] * q.shape[2]}),
                     .out = q.reshape({q.shape[0], q.shape[1] * q.shape[2]})});
            RopeArgs r = q_prep->rope;
            r.x = q;
            r.positions = q_prep->rope.positions.rows(rq[i], q.shape[0]);
            rest_q.push_back(r);
            const TensorView rows = q.reshape({q.shape[0] * q.shape[1], q.shape[2]});
            rest_norms.push_back({.x = rows, .weight = {}, .y = rows, .eps = q_prep->eps});
        }
        calls.emplace_back(p, v);
    }
    for (const CastArgs& c : rest_casts) cast(c);
    rms_norm_ropes(rest_norms, rest_q);  // before any job's attention
    // the decode jobs the warpgroup kernel takes, on it where the call holds enough of them
    // (attention_decode.h)
    std::vector<char> to_wgp(calls.size());
    for (size_t i = 0; i < calls.size(); ++i) to_wgp[i] = cuda::attention_decode_wgp_takes(calls[i].first);
    const bool decode_wgp = std::count(to_wgp.begin(), to_wgp.end(), 1) >= cuda::attention_decode_wgp_min() &&
                            attention_v_.dispatches(0);
    std::vector<cuda::AttentionParams> batch, wgp;
    std::vector<WindowStoreArgs> rest_stores;
    std::vector<RopeArgs> rest_ropes;
    std::vector<ActQuantArgs> rest_quant;  // the outputs not quantised where their kernel stored them
    for (size_t i = 0; i < jobs.size(); ++i) {
        const AttentionArgs& a = jobs[i];
        const WindowStoreArgs& st = stores[i];
        auto [p, v] = calls[i];
        if (decode_wgp && to_wgp[i]) {  // the rings stored after every job read its own
            rotate_out(p, i);
            wgp.push_back(p);
            rest_stores.push_back(st);
            attention_v_.count_dispatch(v, -1), attention_v_.count_dispatch(0);  // mma64's, not v's
            continue;
        }
        const bool fuse = p.L == 1 && kAttentionEnum[v] == cuda::AttentionVariant::kSplitKv &&
                          cuda::attention_batch_takes(p) && (batch.empty() || batch[0].hd == p.hd) &&
                          st.kv.data == a.kv.data && ld(st.kv) == p.ld_kv && st.kv.shape[0] == 1 &&
                          st.ring.data == a.ring.data && st.pos0 == a.pos0 && st.ring.shape[0] >= 1 &&
                          st.ring.shape[1] == p.hd && st.ring.stride[1] == 1;
        if (fuse) {
            p.store_ring = f32m(st.ring);
            p.store_ld = ld(st.ring);
            p.store_len = st.ring.shape[0];
            rotate_out(p, i);
            batch.push_back(p);
            continue;
        }
        cuda::launch_attention(p, scratch_, stream_, kAttentionEnum[v]);
        launched("attention");
        if (p.qp_pos != nullptr) launched("rms_norm"), launched("rope");  // q's, in the kernel's load
        if (p.oq != nullptr) launched("act_quant");
        rest_stores.push_back(st);
        if (p.rope_pos != nullptr) {  // rotated where the kernel stored it
            launched("rope");
            continue;
        }
        RopeArgs r = out_rope;  // this job's rows of the rotation
        r.x = a.out;
        r.positions = out_rope.positions.rows(r0[i], a.out.shape[0]);
        rest_ropes.push_back(r);
    }
    cuda::launch_attention_decode_wgp(wgp.data(), int64_t(wgp.size()), scratch_, stream_);
    if (!wgp.empty()) launched("attention"), launched("rope");
    cuda::launch_attention_batch(batch.data(), int64_t(batch.size()), scratch_, stream_);
    if (!batch.empty()) launched("attention"), launched("window_store"), launched("rope");
    window_stores(rest_stores);  // after every job read its ring
    for (const RopeArgs& r : rest_ropes) rope(r);
    if (out_quant == nullptr) return;
    for (size_t i = 0; i < jobs.size(); ++i) {
        if (calls[i].first.oq != nullptr) continue;
        const int64_t L = jobs[i].out.shape[0];
        rest_quant.push_back({.x = out_quant->x.rows(r0[i], L),
                              .q = out_quant->q.rows(r0[i], L),
                              .scales = out_quant->scales.rows(r0[i], L)});
    }
    for (const ActQuantArgs& a : rest_quant) act_quant(a);
}

}  // namespace di::ops::cuda_impl
