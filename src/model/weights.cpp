// Weight binding: finds each tensor under any accepted name, validates shape and dtype, and places it on the
// backend's device (host backends use the mmap directly; small f32-only tensors are converted once).
#include "model/weights.h"

#include <fmt/ranges.h>

#include <cstring>
#include <set>

#include "model/weight_names.h"

namespace di::model {
namespace {

using ops::QWeight;
using ops::WeightFormat;
using Shape = std::vector<int64_t>;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class Binder {
  public:
    Binder(std::shared_ptr<io::Checkpoint> ck, const ModelConfig& cfg, ops::Backend& be, ModelWeights& mw)
        : ck_(std::move(ck)), cfg_(cfg), be_(be), mw_(mw) {}

    // Looks a tensor up under all candidate names; nullptr when absent.
    const io::TensorEntry* lookup(const std::string& official) {
        for (const auto& n : candidate_names(official))
            if (const io::TensorEntry* e = ck_->find(n)) {
                used_.insert(e->name);
                return e;
            }
        return nullptr;
    }

    Result<const io::TensorEntry*> require(const std::string& official) {
        if (const io::TensorEntry* e = lookup(official)) return e;
        return make_error(ErrorCode::kFormat, "checkpoint {}: missing tensor '{}' (looked for {})",
                          ck_->dir(), official, fmt::join(candidate_names(official), ", "));
    }

    Status check_shape(const io::TensorEntry& e, const Shape& want) {
        if (e.shape != want)
            return make_error(ErrorCode::kFormat, "{}: tensor '{}' has shape [{}], expected [{}]", e.file,
                              e.name, fmt::join(e.shape, ", "), fmt::join(want, ", "));
        return ok_status();
    }

    Result<DType> dtype_of(const io::TensorEntry& e, std::initializer_list<DType> allowed) {
        DI_TRY(DType t, io::safetensors_dtype(e.st_dtype, e.name, e.file));
        for (DType a : allowed)
            if (a == t) return t;
        std::vector<std::string_view> names;
        for (DType a : allowed) names.push_back(dtype_name(a));
        return make_error(ErrorCode::kFormat, "{}: tensor '{}' has dtype {}, expected {}", e.file, e.name,
                          e.st_dtype, fmt::join(names, " or "));
    }

    // A view of `e` (interpreted as `dtype`, logical `shape`) on the backend's device; an empty view while
    // placing is off (the experts of other ranks).
    TensorView place(const io::TensorEntry& e, DType dtype, const Shape& shape, bool is_param = true) {
        count(e, shape, is_param);
        return put(e.data, dtype, shape);
    }

    // Host bytes `data` (as dtype, shape) on the backend's device, as place() does.
    TensorView put(const uint8_t* data, DType dtype, const Shape& shape) {
        TensorView host = make_view(const_cast<uint8_t*>(data), dtype, shape);
        if (!placing_) return TensorView{};
        if (be_.allocator().device() == Device::kHost) return host;
        Tensor t = alloc(dtype, shape);
        be_.copy(t.view(), host);
        mw_.owned.push_back(std::move(t));
        return make_view(mw_.owned.back().view().data, dtype, shape, be_.allocator().device());
    }

    // Rows [first, first + n) of dimension 0 of a float tensor of `shape` (an expert-parallel rank's block of
    // a fused expert tensor): the whole tensor validated and counted, only those rows placed; a view of shape
    // [n, shape[1:]] (empty when n == 0 or nothing is placed).
    Result<TensorView> float_tensor_rows(const std::string& official, const Shape& shape, int64_t first,
                                         int64_t n) {
        DI_TRY(const io::TensorEntry* e, require(official));
        DI_TRY_STATUS(check_shape(*e, shape));
        DI_TRY(DType t, dtype_of(*e, {DType::kF32, DType::kBF16, DType::kF16}));
        count(*e, shape, true);
        if (n == 0) return TensorView{};
        Shape part = shape;
        part[0] = n;
        return put(e->data + size_t(first) * (e->nbytes / size_t(shape[0])), t, part);
    }

    // Float tensor converted to f32 (exact) for ops that take f32 parameters.
    Result<TensorView> f32_param(const std::string& official, const Shape& shape) {
        DI_TRY(const io::TensorEntry* e, require(official));
        DI_TRY_STATUS(check_shape(*e, shape));
        DI_TRY(DType t, dtype_of(*e, {DType::kF32, DType::kBF16, DType::kF16}));
        if (t == DType::kF32) return place(*e, t, shape);
        count(*e, shape, true);
        Tensor host = Tensor(host_allocator(), DType::kF32, {int64_t(e->nbytes / dtype_size(t))});
        for (size_t i = 0; i < e->nbytes / dtype_size(t); ++i)
            host.view().ptr<float>()[i] = load_float(e->data, t, int64_t(i));
        TensorView hv = make_view(host.view().data, DType::kF32, shape);
        if (be_.allocator().device() == Device::kHost) {
            mw_.owned.push_back(std::move(host));
            return hv;
        }
        Tensor dev = alloc(DType::kF32, shape);
        be_.copy(dev.view(), hv);
        mw_.owned.push_back(std::move(dev));
        return make_view(mw_.owned.back().view().data, DType::kF32, shape, be_.allocator().device());
    }

    // Float tensor in its stored dtype (norm weights, embeddings).
    Result<TensorView> float_tensor(const std::string& official, const Shape& shape) {
        DI_TRY(const io::TensorEntry* e, require(official));
        DI_TRY_STATUS(check_shape(*e, shape));
        DI_TRY(DType t, dtype_of(*e, {DType::kF32, DType::kBF16, DType::kF16}));
        return place(*e, t, shape);
    }

    // Integer tensor whose every value must lie in [0, limit): the kernels index with it unchecked.
    Result<TensorView> index_tensor(const std::string& official, const Shape& shape, int64_t limit) {
        DI_TRY(const io::TensorEntry* e, require(official));
        DI_TRY_STATUS(check_shape(*e, shape));
        DI_TRY(DType t, dtype_of(*e, {DType::kI64, DType::kI32}));
        const int64_t n = int64_t(e->nbytes / dtype_size(t));
        for (int64_t i = 0; i < n; ++i) {
            int64_t v = 0;
            if (t == DType::kI64) {
                std::memcpy(&v, e->data + i * 8, 8);
            } else {
                int32_t v32 = 0;
                std::memcpy(&v32, e->data + i * 4, 4);
                v = v32;
            }
            if (v < 0 || v >= limit)
                return make_error(ErrorCode::kFormat,
                                  "{}: tensor '{}' holds {} at flat index {}, outside [0, {})", e->file,
                                  e->name, v, i, limit);
        }
        return place(*e, t, shape);
    }

    // Linear weight `base`.weight [out, in] in dense, FP8 block or FP4 group format, with its scale.
    Result<QWeight> linear(const std::string& base, int64_t out, int64_t in) {
        DI_TRY(const io::TensorEntry* e, require(base + ".weight"));
        DI_TRY(DType t, dtype_of(*e, {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3, DType::kI8,
                                      DType::kU8}));
        QWeight w;
        w.out_dim = out;
        w.in_dim = in;
        if (dtype_is_float(t)) {
            DI_TRY_STATUS(check_shape(*e, {out, in}));
            w.data = place(*e, t, {out, in});
            return w;
        }
        const bool fp8 = t == DType::kF8E4M3;
        w.format = fp8 ? WeightFormat::kFp8Block : WeightFormat::kFp4Group;
        if (!fp8 && in % ops::kFp4Group != 0)
            return make_error(ErrorCode::kFormat, "{}: fp4 tensor '{}' has {} inputs, not a multiple of 32",
                              e->file, e->name, in);
        DI_TRY_STATUS(check_shape(*e, fp8 ? Shape{out, in} : Shape{out, in / 2}));
        const io::TensorEntry* s = lookup(base + ".scale");
        if (!s) s = lookup(base + ".weight_scale_inv");
        if (!s)
            return make_error(ErrorCode::kFormat, "checkpoint {}: quantized tensor '{}' has no '{}.scale'",
                              ck_->dir(), e->name, base);
        const Shape sshape = fp8 ? Shape{ceil_div(out, ops::kFp8Block), ceil_div(in, ops::kFp8Block)}
                                 : Shape{out, in / ops::kFp4Group};
        DI_TRY_STATUS(check_shape(*s, sshape));
        DI_TRY(DType st, dtype_of(*s, {DType::kE8M0, DType::kF32}));
        w.data = place(*e, fp8 ? DType::kF8E4M3 : DType::kFP4x2, fp8 ? Shape{out, in} : Shape{out, in / 2});
        w.scale = place(*s, st, sshape, /*is_param=*/false);
        if (fp8 && !w.scale.empty())
            if (auto bound = be_.fp8_block_scales(w.scale)) {  // the backend's own form, made once
                if (!mw_.owned.empty() && mw_.owned.back().view().data == w.scale.data)
                    mw_.owned.pop_back();  // the checkpoint's form on the device: no longer read
                mw_.owned.push_back(std::move(bound->storage));
                w.scale = bound->view;
            }
        if (!fp8) mw_.stats.params += out * in / 2;  // place() counted bytes; fp4 holds two values per byte
        return w;
    }

    void set_placing(bool on) { placing_ = on; }

    Status check_unused() {
        for (const auto& [name, e] : ck_->tensors()) {
            if (used_.count(name)) continue;
            if (is_ignored_tensor(name)) {
                ++mw_.stats.skipped_tensors;
                if (name.rfind("mtp.", 0) == 0 || name.rfind("model.mtp.", 0) == 0) ++mw_.stats.skipped_mtp;
                continue;
            }
            return make_error(ErrorCode::kFormat,
                              "{}: unexpected tensor '{}' (not part of this DeepseekV4 config)", e.file,
                              name);
        }
        return ok_status();
    }

  private:
    static TensorView make_view(void* data, DType dtype, const Shape& shape, Device device = Device::kHost) {
        TensorView v;
        v.data = data;
        v.device = device;
        v.dtype = dtype;
        v.ndim = int(shape.size());
        int64_t st = 1;
        for (int d = v.ndim - 1; d >= 0; --d) {
            v.shape[size_t(d)] = shape[size_t(d)];
            v.stride[size_t(d)] = st;
            st *= shape[size_t(d)];
        }
        return v;
    }
    Tensor alloc(DType dtype, const Shape& shape) {
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        Tensor t(be_.allocator(), dtype, {n});
        return t;
    }
    void count(const io::TensorEntry& e, const Shape& shape, bool is_param) {
        ++mw_.stats.n_tensors;
        ++mw_.stats.tensors_by_dtype[e.st_dtype];
        mw_.stats.bytes += int64_t(e.nbytes);
        if (!is_param) return;  // block scales are not parameters
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        mw_.stats.params += n;
    }

    std::shared_ptr<io::Checkpoint> ck_;
    const ModelConfig& cfg_;
    ops::Backend& be_;
    ModelWeights& mw_;
    std::set<std::string> used_;
    bool placing_ = true;
};

}  // namespace

namespace {

Result<CompressorWeights> bind_compressor(Binder& b, const std::string& p, int64_t d, int64_t rate,
                                          bool overlap, int64_t hidden) {
    const int64_t width = overlap ? 2 * d : d;
    CompressorWeights c;
    DI_TRY(c.wkv, b.linear(p + "wkv", width, hidden));
    DI_TRY(c.wgate, b.linear(p + "wgate", width, hidden));
    DI_TRY(c.ape, b.f32_param(p + "ape", {rate, width}));
    DI_TRY(c.norm, b.float_tensor(p + "norm.weight", {d}));
    return c;
}

Result<HcWeights> bind_hc(Binder& b, const std::string& p, int64_t mix, int64_t width, int64_t n_scale) {
    HcWeights h;
    DI_TRY(h.fn, b.f32_param(p + "fn", {mix, width}));
    DI_TRY(h.base, b.f32_param(p + "base", {mix}));
    DI_TRY(h.scale, b.f32_param(p + "scale", {n_scale}));
    return h;
}

// A block's kinds: layer l's from the config, or the MTP block's (sliding window, score-routed).
struct BlockKind {
    std::string prefix;  // "layers.{l}." or "mtp.0."
    AttnType attn = AttnType::kSliding;
    MoeType moe = MoeType::kScore;
    int64_t rate = 0;           // compression rate (0: sliding)
    std::string fused_experts;  // transformers' fused expert tensors' prefix; "" where none can exist
};

BlockKind layer_kind(const ModelConfig& c, int l) {
    return {fmt::format("layers.{}.", l), c.attn_types[size_t(l)], c.moe_types[size_t(l)], c.compress_rate(l),
            fmt::format("model.layers.{}.mlp.experts.", l)};
}

Result<AttentionWeights> bind_attention(Binder& b, const ModelConfig& c, const BlockKind& k) {
    const std::string p = k.prefix + "attn.";
    const int64_t D = c.hidden_dim, H = c.n_heads, hd = c.head_dim;
    AttentionWeights a;
    DI_TRY(a.wq_a, b.linear(p + "wq_a", c.q_lora_rank, D));
    DI_TRY(a.q_norm, b.float_tensor(p + "q_norm.weight", {c.q_lora_rank}));
    DI_TRY(a.wq_b, b.linear(p + "wq_b", H * hd, c.q_lora_rank));
    DI_TRY(a.wkv, b.linear(p + "wkv", hd, D));
    DI_TRY(a.kv_norm, b.float_tensor(p + "kv_norm.weight", {hd}));
    DI_TRY(a.wo_a, b.linear(p + "wo_a", c.o_groups * c.o_lora_rank, H * hd / c.o_groups));
    DI_TRY(a.wo_b, b.linear(p + "wo_b", D, c.o_groups * c.o_lora_rank));
    DI_TRY(a.sinks, b.f32_param(p + "attn_sink", {H}));
    if (k.attn == AttnType::kSliding) return a;
    const bool csa = k.attn == AttnType::kCsa;
    DI_TRY(a.compressor, bind_compressor(b, p + "compressor.", hd, k.rate, csa, D));
    if (!csa) return a;
    DI_TRY(a.index_compressor,
           bind_compressor(b, p + "indexer.compressor.", c.index_dim, c.csa_rate, true, D));
    DI_TRY(a.index_wq_b, b.linear(p + "indexer.wq_b", c.index_heads * c.index_dim, c.q_lora_rank));
    DI_TRY(a.index_weights_proj, b.linear(p + "indexer.weights_proj", c.index_heads, D));
    return a;
}

// Routed experts: per-expert tensors (official / save_pretrained) or transformers' fused [E, 2I, D] / [E, D,
// I]. Experts `part` does not give this rank are validated and left empty: per-expert tensors are not placed,
// and of a fused tensor only the rank's block of experts is.
Result<std::vector<ops::ExpertWeights>> bind_experts(Binder& b, const ModelConfig& c, const BlockKind& k,
                                                     const ExpertPartition& part) {
    const int64_t E = c.n_experts, I = c.moe_dim, D = c.hidden_dim;
    std::vector<ops::ExpertWeights> ex(static_cast<size_t>(E));
    const std::string& fused = k.fused_experts;
    if (!fused.empty() && b.lookup(k.prefix + "ffn.experts.0.w1.weight") == nullptr) {
        const int64_t first = part.first(E), own = part.end(E) - first;
        DI_TRY(TensorView gu, b.float_tensor_rows(fused + "gate_up_proj", {E, 2 * I, D}, first, own));
        DI_TRY(TensorView dn, b.float_tensor_rows(fused + "down_proj", {E, D, I}, first, own));
        if (gu.empty() || dn.empty()) return ex;  // nothing placed
        for (int64_t e = first; e < first + own; ++e) {
            const int64_t j = e - first;  // its place in the rank's block
            ops::QWeight g{ops::WeightFormat::kDense, gu, {}, 2 * I, D};
            g.data.ndim = 2;
            g.data.data = static_cast<char*>(gu.data) + j * 2 * I * D * int64_t(dtype_size(gu.dtype));
            g.data.shape = {2 * I, D, 0, 0};
            g.data.stride = {D, 1, 0, 0};
            ex[size_t(e)].w1 = g.rows(0, I);
            ex[size_t(e)].w3 = g.rows(I, I);
            ops::QWeight d{ops::WeightFormat::kDense, dn, {}, D, I};
            d.data.ndim = 2;
            d.data.data = static_cast<char*>(dn.data) + j * D * I * int64_t(dtype_size(dn.dtype));
            d.data.shape = {D, I, 0, 0};
            d.data.stride = {I, 1, 0, 0};
            ex[size_t(e)].w2 = d;
        }
        return ex;
    }
    for (int64_t e = 0; e < E; ++e) {
        const std::string p = fmt::format("{}ffn.experts.{}.", k.prefix, e);
        b.set_placing(part.owns(e, E));
        auto w1 = b.linear(p + "w1", I, D), w3 = b.linear(p + "w3", I, D), w2 = b.linear(p + "w2", D, I);
        b.set_placing(true);
        DI_TRY(ex[size_t(e)].w1, std::move(w1));
        DI_TRY(ex[size_t(e)].w3, std::move(w3));
        DI_TRY(ex[size_t(e)].w2, std::move(w2));
    }
    return ex;
}

Result<FfnWeights> bind_ffn(Binder& b, const ModelConfig& c, const BlockKind& k,
                            const ExpertPartition& part) {
    const std::string p = k.prefix + "ffn.";
    const int64_t D = c.hidden_dim, I = c.moe_dim;
    FfnWeights f;
    DI_TRY(f.gate, b.linear(p + "gate", c.n_experts, D));
    if (k.moe == MoeType::kHash) {
        DI_TRY(f.tid2eid,
               b.index_tensor(p + "gate.tid2eid", {c.vocab_size, c.n_experts_active}, c.n_experts));
    } else {
        DI_TRY(f.gate_bias, b.f32_param(p + "gate.bias", {c.n_experts}));
    }
    DI_TRY(f.experts, bind_experts(b, c, k, part));
    DI_TRY(f.shared.w1, b.linear(p + "shared_experts.w1", I, D));
    DI_TRY(f.shared.w3, b.linear(p + "shared_experts.w3", I, D));
    DI_TRY(f.shared.w2, b.linear(p + "shared_experts.w2", D, I));
    return f;
}

Result<LayerWeights> bind_block(Binder& b, const ModelConfig& c, const BlockKind& k,
                                const ExpertPartition& experts) {
    const int64_t D = c.hidden_dim, hc = c.hc_mult, mix = (2 + hc) * hc;
    LayerWeights lw;
    DI_TRY(lw.attn_norm, b.float_tensor(k.prefix + "attn_norm.weight", {D}));
    DI_TRY(lw.ffn_norm, b.float_tensor(k.prefix + "ffn_norm.weight", {D}));
    DI_TRY(lw.hc_attn, bind_hc(b, k.prefix + "hc_attn_", mix, hc * D, 3));
    DI_TRY(lw.hc_ffn, bind_hc(b, k.prefix + "hc_ffn_", mix, hc * D, 3));
    DI_TRY(lw.attn, bind_attention(b, c, k));
    DI_TRY(lw.ffn, bind_ffn(b, c, k, experts));
    return lw;
}

Result<MtpWeights> bind_mtp(Binder& b, const ModelConfig& c, const ExpertPartition& experts) {
    const int64_t D = c.hidden_dim, hc = c.hc_mult;
    const std::string p = "mtp.0.";
    MtpWeights m;
    DI_TRY(m.e_proj, b.linear(p + "e_proj", D, D));
    DI_TRY(m.h_proj, b.linear(p + "h_proj", D, D));
    DI_TRY(m.enorm, b.float_tensor(p + "enorm.weight", {D}));
    DI_TRY(m.hnorm, b.float_tensor(p + "hnorm.weight", {D}));
    DI_TRY(m.norm, b.float_tensor(p + "norm.weight", {D}));
    DI_TRY(m.hc_head, bind_hc(b, p + "hc_head_", hc, hc * D, 1));
    DI_TRY(m.block, bind_block(b, c, {p, AttnType::kSliding, MoeType::kScore, 0, ""}, experts));
    return m;
}

}  // namespace

Result<ModelWeights> bind_weights(std::shared_ptr<io::Checkpoint> ckpt, const ModelConfig& c,
                                  ops::Backend& backend, const ExpertPartition& experts) {
    ModelWeights mw;
    mw.checkpoint = ckpt;
    Binder b(ckpt, c, backend, mw);
    const int64_t D = c.hidden_dim, hc = c.hc_mult;
    DI_TRY(mw.embed, b.float_tensor("embed.weight", {c.vocab_size, D}));
    DI_TRY(mw.head, b.linear("head", c.vocab_size, D));
    DI_TRY(mw.norm, b.float_tensor("norm.weight", {D}));
    DI_TRY(mw.hc_head, bind_hc(b, "hc_head_", hc, hc * D, 1));
    for (int l = 0; l < int(c.n_layers); ++l) {
        DI_TRY(LayerWeights lw, bind_block(b, c, layer_kind(c, l), experts));
        mw.layers.push_back(std::move(lw));
    }
    if (c.draft_tokens > 0) {
        auto mtp = bind_mtp(b, c, experts);
        if (!mtp.ok())  // transformers' save_pretrained drops mtp.*: say what the error is about
            return make_error(mtp.error().code, "{} (speculative decoding needs the checkpoint's MTP block)",
                              mtp.error().message);
        mw.mtp = std::move(mtp.value());
    }
    DI_TRY_STATUS(b.check_unused());
    const int64_t expert_params = 3 * c.moe_dim * D;
    const int64_t moe_blocks = c.n_layers + (mw.mtp ? 1 : 0);
    mw.stats.active_params =
        mw.stats.params - moe_blocks * (c.n_experts - c.n_experts_active) * expert_params;
    return mw;
}

}  // namespace di::model
