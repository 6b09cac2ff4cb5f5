// Shape and dtype contracts shared by every backend (one check() per Args).
#include <climits>
#include <cmath>

#include "ops/act_quant.h"
#include "ops/backend.h"

namespace di::ops {
namespace {
void same_shape(const TensorView& a, const TensorView& b, std::string_view what) {
    bool same = a.ndim == b.ndim;
    for (int i = 0; same && i < a.ndim; ++i) same = a.shape[i] == b.shape[i];
    DI_CHECK(same, "{}: shapes {} and {} differ", what, a.describe(), b.describe());
}
// The residual streams of both precisions: f32 (exact) or bf16 (native).
void check_streams(const TensorView& v, std::string_view what) {
    DI_CHECK(v.ndim == 3 && v.is_contiguous() && (v.dtype == DType::kF32 || v.dtype == DType::kBF16),
             "{}.streams: expected contiguous f32 or bf16 [n, hc, dim], got {}", what, v.describe());
}
}  // namespace

void check(const EmbedArgs& a) {
    check_dtype(a.tokens, DType::kI32, "embed.tokens");
    check_rows(a.out, 2, "embed.out");
    DI_CHECK(a.out.dtype == DType::kF32 || a.out.dtype == DType::kBF16, "embed.out {}", a.out.describe());
    DI_CHECK(a.table.ndim == 2 && dtype_is_float(a.table.dtype), "embed.table {}", a.table.describe());
    DI_CHECK(a.out.shape[0] == a.tokens.numel() && a.out.shape[1] == a.table.shape[1],
             "embed: out {} table {}", a.out.describe(), a.table.describe());
}

void check(const CastArgs& a) {
    check_rows(a.x, 2, "cast.x");
    check_rows(a.out, 2, "cast.out");
    same_shape(a.x, a.out, "cast");
    for (const TensorView* v : {&a.x, &a.out})
        DI_CHECK(v->dtype == DType::kF32 || v->dtype == DType::kBF16, "cast: {} is not f32 or bf16",
                 v->describe());
}

void check(const AddArgs& a) {
    check_rows(a.a, 2, "add.a");
    same_shape(a.a, a.b, "add");
    same_shape(a.a, a.out, "add");
}

void check(const SwigluArgs& a) {
    check_rows(a.gate, 2, "swiglu.gate");
    same_shape(a.gate, a.up, "swiglu");
    same_shape(a.gate, a.out, "swiglu");
    DI_CHECK(a.limit > 0, "swiglu: limit {} must be > 0 (+inf: no clamp)", a.limit);  // NaN fails too
}

void check(const ArgmaxArgs& a) {
    check_rows(a.x, 2, "argmax.x");
    DI_CHECK(a.x.shape[1] > 0 && a.x.shape[1] <= INT32_MAX, "argmax: row width {}", a.x.shape[1]);
    for (const TensorView* v : {&a.ids, &a.bad}) {
        check_dtype(*v, DType::kI32, "argmax.ids/bad");
        DI_CHECK(v->is_contiguous() && v->numel() == a.x.shape[0], "argmax: {} for x {}", v->describe(),
                 a.x.describe());
    }
}

std::pair<int32_t, int32_t> argmax_row(const float* x, int64_t V) {
    int32_t best = 0, bad = -1;
    for (int64_t v = 0; v < V; ++v) {
        if (!std::isfinite(x[v])) {
            if (bad < 0) bad = int32_t(v);
            continue;
        }
        if (x[v] > x[best] || !std::isfinite(x[best])) best = int32_t(v);
    }
    return {best, bad};
}

void check(const RmsNormArgs& a) {
    check_rows(a.x, 2, "rms_norm.x");
    same_shape(a.x, a.y, "rms_norm");
    DI_CHECK(a.weight.empty() || a.weight.numel() == a.x.shape[1], "rms_norm: weight {} for x {}",
             a.weight.describe(), a.x.describe());
}

void check(const RopeArgs& a) {
    DI_CHECK(a.x.ndim == 3 && a.x.stride[2] == 1, "rope.x {}", a.x.describe());
    check_dtype(a.positions, DType::kI32, "rope.positions");
    DI_CHECK(a.positions.numel() == a.x.shape[0], "rope: {} positions for {} rows", a.positions.numel(),
             a.x.shape[0]);
    DI_CHECK(2 * a.inv_freq.numel() <= a.x.shape[2], "rope: rope_dim {} > head_dim {}",
             2 * a.inv_freq.numel(), a.x.shape[2]);
}

void check(const CompressArgs& a) {
    const int64_t width = a.kv.shape[1], d = a.out.shape[1];
    check_rows(a.kv, 2, "compress.kv");
    same_shape(a.kv, a.gate, "compress kv/gate");
    DI_CHECK(width == (a.overlap ? 2 * d : d), "compress: width {} for entry dim {}", width, d);
    DI_CHECK(a.bias.shape[0] == a.rate && a.bias.shape[1] == width, "compress.bias {}", a.bias.describe());
    DI_CHECK(a.buf_kv.shape[0] == a.rate && a.buf_gate.shape[0] == a.rate, "compress: buffer rows != rate");
    DI_CHECK(!a.overlap || (a.ovl_kv.shape[0] == a.rate && a.ovl_kv.shape[1] == d), "compress.ovl_kv {}",
             a.ovl_kv.describe());
    DI_CHECK(a.out.shape[0] == CompressArgs::n_new(a.pos0, a.kv.shape[0], a.rate), "compress: out rows {}",
             a.out.shape[0]);
}

void check(const IndexerTopkArgs& a) {
    DI_CHECK(a.q.ndim == 3 && a.weights.ndim == 2 && a.keys.ndim == 2, "indexer shapes q {} w {} keys {}",
             a.q.describe(), a.weights.describe(), a.keys.describe());
    DI_CHECK(a.q.shape[2] == a.keys.shape[1] && a.weights.shape[1] == a.q.shape[1], "indexer dims");
    check_dtype(a.picks, DType::kI32, "indexer.picks");
    DI_CHECK(a.picks.shape[0] == a.q.shape[0] && a.picks.shape[1] <= a.keys.shape[0], "indexer.picks {}",
             a.picks.describe());
}

void check(const AttentionArgs& a) {
    DI_CHECK(a.q.ndim == 3 && a.q.stride[2] == 1, "attention.q {}", a.q.describe());
    const int64_t L = a.q.shape[0], hd = a.q.shape[2];
    DI_CHECK(a.kv.shape[0] == L && a.kv.shape[1] == hd, "attention.kv {}", a.kv.describe());
    DI_CHECK(a.window >= 2 && a.ring.shape[0] == a.window - 1, "attention: ring {} window {}",
             a.ring.describe(), a.window);
    DI_CHECK(a.n_cached <= a.window - 1 && a.n_cached <= a.pos0, "attention: n_cached {}", a.n_cached);
    DI_CHECK(a.sinks.numel() == a.q.shape[1], "attention.sinks {}", a.sinks.describe());
    same_shape(a.q, a.out, "attention q/out");
    if (a.comp_mask != CompMask::kNone)
        DI_CHECK(a.comp.shape[1] == hd, "attention.comp {}", a.comp.describe());
    if (a.comp_mask == CompMask::kPicks) check_dtype(a.picks, DType::kI32, "attention.picks");
}

void check(const WindowStoreArgs& a) {
    DI_CHECK(a.kv.shape[1] == a.ring.shape[1] && a.ring.shape[0] >= 1, "window_store kv {} ring {}",
             a.kv.describe(), a.ring.describe());
}

void check(const QueryPrep& a) {
    check(a.rope);
    DI_CHECK(a.rope.x.is_contiguous(), "attention q_prep: q {} not contiguous", a.rope.x.describe());
    if (a.src.empty()) return;
    check_dtype(a.src, DType::kBF16, "attention q_prep.src");
    same_shape(a.src, a.rope.x, "attention q_prep src/q");
    DI_CHECK(a.src.is_contiguous(), "attention q_prep: src {} not contiguous", a.src.describe());
}

void check(const MhcPreArgs& a) {
    check_streams(a.streams, "mhc_pre");
    const int64_t hc = a.streams.shape[1], D = a.streams.shape[2];
    DI_CHECK(a.fn.shape[0] == (2 + hc) * hc && a.fn.shape[1] == hc * D, "mhc_pre.fn {}", a.fn.describe());
    DI_CHECK(a.base.numel() == (2 + hc) * hc && a.scale.numel() == 3, "mhc_pre base/scale");
    DI_CHECK(a.x.shape[1] == D && a.post.shape[1] == hc && a.comb.shape[2] == hc, "mhc_pre outputs");
}

void check(const MhcPostArgs& a) {
    check_streams(a.streams, "mhc_post");
    same_shape(a.streams, a.out, "mhc_post streams/out");
    DI_CHECK(a.out.dtype == a.streams.dtype && a.out.is_contiguous(), "mhc_post.out {}: streams {}",
             a.out.describe(), a.streams.describe());
    DI_CHECK(a.streams.data != a.out.data, "mhc_post: out aliases streams");
    DI_CHECK(a.a.shape[1] == a.streams.shape[2], "mhc_post.a {}", a.a.describe());
}

void check(const HcHeadArgs& a) {
    check_streams(a.streams, "hc_head");
    const int64_t hc = a.streams.shape[1], D = a.streams.shape[2];
    DI_CHECK(a.fn.shape[0] == hc && a.fn.shape[1] == hc * D, "hc_head.fn {}", a.fn.describe());
    DI_CHECK(a.out.shape[1] == D, "hc_head.out {}", a.out.describe());
}

void check(const RouteArgs& a) {
    check_rows(a.logits, 2, "route.logits");
    check_dtype(a.ids, DType::kI32, "route.ids");
    const int64_t k = a.ids.shape[1];
    DI_CHECK(k <= a.logits.shape[1], "route: k {} > n_experts {}", k, a.logits.shape[1]);
    DI_CHECK(a.tid2eid.empty() || (a.tid2eid.shape[1] == k && !a.tokens.empty()), "route.tid2eid {}",
             a.tid2eid.describe());
}

void check(const MoeArgs& a) {
    check_rows(a.x, 2, "moe.x");
    same_shape(a.x, a.out, "moe x/out");
    same_shape(a.ids, a.weights, "moe ids/weights");
    DI_CHECK(a.experts != nullptr && a.n_experts > 0, "moe: no experts");
    DI_CHECK(a.limit > 0, "moe: limit {} must be > 0 (+inf: no clamp)", a.limit);  // NaN fails too
    if (a.act == ActQuant::kFp8Block128) {
        DI_CHECK(a.x.shape[1] % kActBlock == 0, "moe: quantised activations need hidden {} a multiple of {}",
                 a.x.shape[1], kActBlock);
        for (int64_t e = 0; e < a.n_experts; ++e)
            DI_CHECK(a.experts[e].w1.out_dim % kActBlock == 0,
                     "moe: quantised activations need moe_dim {} (expert {}) a multiple of {}",
                     a.experts[e].w1.out_dim, e, kActBlock);
    }
    if (a.pass != MoeArgs::Pass::kWhole) {
        DI_CHECK(a.slots.dtype == DType::kF32 && a.slots.is_contiguous() && a.slots.ndim == 3 &&
                     a.slots.shape[0] == a.x.shape[0] && a.slots.shape[1] == a.ids.shape[1] &&
                     a.slots.shape[2] == a.x.shape[1],
                 "moe.slots {}", a.slots.describe());
        DI_CHECK(a.pass == MoeArgs::Pass::kCombine ||
                     (0 <= a.expert_first && a.expert_first <= a.expert_end && a.expert_end <= a.n_experts),
                 "moe: experts [{}, {}) of {}", a.expert_first, a.expert_end, a.n_experts);
    }
    check_row_groups(a.row_groups, a.x.shape[0], "moe");
    DI_CHECK(a.row_sizes.empty() || (a.row_groups.empty() && a.row_sizes.dtype == DType::kI32 &&
                                     a.row_sizes.ndim == 1 && a.row_sizes.shape[0] == a.x.shape[0]),
             "moe.row_sizes {} for {} rows", a.row_sizes.describe(), a.x.shape[0]);
}

}  // namespace di::ops
