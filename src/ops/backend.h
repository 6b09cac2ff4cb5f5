// The op catalogue: every op the V4 forward uses, listed once. Backends (ref, cpu, cuda) implement all of
// it; the model calls only these. Each method runs check(args) before touching memory.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "ops/act_quant.h"
#include "ops/attention.h"
#include "ops/compressor.h"
#include "ops/elementwise.h"
#include "ops/indexer.h"
#include "ops/kernel_variants.h"
#include "ops/linear.h"
#include "ops/mhc.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/sampling.h"

namespace di::ops {

// Largest sizes a backend's kernels take (0: no limit), so the model loader can refuse a config whose
// kernels would abort at the first request.
struct KernelLimits {
    int64_t head_dim = 0, index_topk = 0, hc_mult = 0;
};

class Backend {
  public:
    virtual ~Backend() = default;
    virtual std::string_view name() const = 0;
    // The hardware the kernels use, in words (threads, instruction sets, device), where the backend knows.
    virtual std::string hardware() const { return {}; }
    // Whether a kernel choice depends on LinearArgs / MoeArgs row groups (then expert parallelism sends each
    // token's group size with it; otherwise it need not).
    virtual bool uses_row_groups() const { return false; }

    // Memory on the backend's device.
    virtual Allocator& allocator() = 0;
    // An FP8 weight's 128x128 block scales (`scale`, on this backend's device) in the form its kernels read
    // without converting them at every call, made once when the weights are bound: the storage and a view of
    // it with scale's shape (any row stride). nullopt: the kernels read the checkpoint's form as it is.
    struct BoundScales {
        Tensor storage;
        TensorView view;
    };
    virtual std::optional<BoundScales> fp8_block_scales(const TensorView& /*scale*/) { return std::nullopt; }
    // dst <- src; both contiguous, same dtype and element count, either device.
    virtual void copy(const TensorView& dst, const TensorView& src) = 0;
    // Several copies, as copy does each (in order; no two may overlap): one launch on a GPU.
    struct CopyPair {
        TensorView dst, src;
    };
    virtual void copy_many(std::span<const CopyPair> pairs) {
        for (const CopyPair& p : pairs) copy(p.dst, p.src);
    }
    virtual void fill_zero(const TensorView& dst) = 0;
    virtual void synchronize() {}
    // Makes the calling thread's later calls run on this backend's device (a CUDA backend of GPU r, called
    // from a thread that last used another GPU: expert parallelism's rank threads).
    virtual void bind_thread() {}
    // A label for what runs next ("layer 3 / attention"); used by compare mode and profilers.
    virtual void set_scope(std::string_view) {}
    // Kernel variants (ops/kernel_variants.h): every variant this backend has, the allow-list dispatch
    // obeys (fallbacks are always allowed), and how often each variant ran (so a screen can tell that a
    // candidate really ran). force_variant makes every later call of `op` take `variant` ("" restores
    // the default dispatch), for tests, benchmarks and the screen; false for an unknown op or variant.
    virtual std::vector<KernelVariant> kernel_variants() const { return {}; }
    virtual void set_allow_list(const AllowList&) {}
    virtual int64_t dispatch_count(std::string_view /*op*/, std::string_view /*variant*/) const { return 0; }
    virtual bool force_variant(std::string_view, std::string_view variant) { return variant.empty(); }
    virtual KernelLimits kernel_limits() const { return {}; }
    // Graph segments. The model brackets a run of ops whose every argument (pointers, shapes, scalars) is a
    // function of `key`; the same key again means the same calls. A backend may then capture the run once
    // and replay it: the ops of a replayed run return at once, without checks. A host copy or synchronize()
    // inside a run ends its capture (the run stays correct, only uncached). set_graphs(false) runs every op
    // as it comes. Segments do not nest. The default backend runs every op as it comes.
    virtual void segment_begin(std::span<const int64_t> /*key*/) {}
    virtual void segment_end() {}
    virtual void set_graphs(bool /*on*/) {}

    virtual void embed(const EmbedArgs& a) = 0;
    // The residual streams' conversions (native precision's bf16 streams); this default is for host memory.
    virtual void cast(const CastArgs& a);
    virtual void add(const AddArgs& a) = 0;
    virtual void swiglu(const SwigluArgs& a) = 0;
    virtual void linear(const LinearArgs& a) = 0;
    // Independent linears (no job reads another's output): the same results as linear() on each, which
    // is what this default does; a backend may run them in fewer launches.
    virtual void linears(std::span<const LinearArgs> jobs) {
        for (const LinearArgs& a : jobs) linear(a);
    }
    virtual void rms_norm(const RmsNormArgs& a) = 0;
    virtual void rope(const RopeArgs& a) = 0;
    virtual void compress(const CompressArgs& a) = 0;
    // Several sequences' compressors (each its own state; no job reads another's output): the same results
    // as compress() on each, which is what this default does; a backend may batch the launches.
    virtual void compresses(std::span<const CompressArgs> jobs) {
        for (const CompressArgs& a : jobs) compress(a);
    }
    virtual void indexer_topk(const IndexerTopkArgs& a) = 0;
    // Several sequences' indexer calls (each its own keys and picks): as indexer_topk() on each.
    virtual void indexer_topks(std::span<const IndexerTopkArgs> jobs) {
        for (const IndexerTopkArgs& a : jobs) indexer_topk(a);
    }
    virtual void attention(const AttentionArgs& a) = 0;
    // Attention of several sequences' chunks (each its own state; no job reads another's output): the same
    // results as attention() on each, which is what this default does; a backend may batch the launches.
    virtual void attentions(std::span<const AttentionArgs> jobs) {
        for (const AttentionArgs& a : jobs) attention(a);
    }
    virtual void window_store(const WindowStoreArgs& a) = 0;
    // Several sequences' window stores (distinct rings): as window_store() on each.
    virtual void window_stores(std::span<const WindowStoreArgs> jobs) {
        for (const WindowStoreArgs& a : jobs) window_store(a);
    }
    // An attention layer's tail: q_prep's norm and rotation of the queries when given (q_prep->rope.x holds
    // every job's q rows), attentions(jobs), then window_stores(stores) (each sequence's ring after every job
    // read it), then rope(out_rope), the inverse rotation of the outputs (out_rope.x holds every job's out
    // rows), then act_quant(out_quant) when given (out_quant->x: out_rope.x's rows), which is what this
    // default does; a backend may prepare q where its kernel loads it, and store, rotate and quantise where
    // it writes a job's output (the calls' bits, up to the sum order of q's norm). With out_quant, out's f32
    // rows are unspecified after the call (a backend may write only the quantised ones).
    virtual void attentions_stored(std::span<const AttentionArgs> jobs,
                                   std::span<const WindowStoreArgs> stores, const RopeArgs& out_rope,
                                   const QueryPrep* q_prep, const ActQuantArgs* out_quant) {
        if (q_prep != nullptr) prepare_queries(*q_prep);
        attentions(jobs);
        window_stores(stores);
        rope(out_rope);
        if (out_quant != nullptr) act_quant(*out_quant);
    }
    // q_prep as rms_norm_ropes on q's head rows, in place.
    void prepare_queries(const QueryPrep& q_prep);
    // Whether attentions_stored applies a QueryPrep and an out_quant inside its attention kernels for chunks
    // of these query counts (n_heads, head_dim, AttentionArgs::f16): the model then hands q's norm and
    // rotation to the tail instead of running them beside kv's, and has the output quantised there for the
    // linears that read it. A prediction for speed only: attentions_stored does both for every job either
    // way.
    virtual bool fuses_attention_tail(std::span<const int64_t> /*chunk_queries*/, int64_t /*n_heads*/,
                                      int64_t /*head_dim*/, bool /*f16*/) const {
        return false;
    }
    virtual void mhc_pre(const MhcPreArgs& a) = 0;
    virtual void mhc_post(const MhcPostArgs& a) = 0;
    virtual void hc_head(const HcHeadArgs& a) = 0;
    virtual void route(const RouteArgs& a) = 0;
    virtual void moe(const MoeArgs& a) = 0;
    // The native precision's activation quantiser as an op (act_quant.h): a producer's rows quantised once
    // for the linears that read them. This default is for host memory.
    virtual void act_quant(const ActQuantArgs& a);
    // The greedy pick of each logits row (elementwise.h). This default is for host memory; a device backend
    // computes the picks where the logits are, so only ids cross to the host.
    virtual void argmax(const ArgmaxArgs& a);
    // The sampling candidates of each logits row (sampling.h); this default is for host memory, as argmax's.
    virtual void top_candidates(const TopCandidatesArgs& a);
    // Whether top_candidates runs where this backend's logits are, off the host (the engine then samples
    // from candidates by default).
    virtual bool candidates_on_device() const { return false; }
    // Whether the native precision keeps the residual streams in bf16 here (ops/mhc.h; otherwise f32): every
    // backend does by default (cuda's DEEPINFER_BF16_STREAMS=0 keeps f32 for A/B timing).
    virtual bool bf16_streams() const { return true; }
    // Whether the native precision keeps the attention's queries (wq_b's output) in bf16, as DeepSeek's
    // inference code stores them (QueryPrep::src; otherwise f32). A storage choice of the backend, as its
    // kernels' operand types are: cuda does (its attention reads them where it prepares q: half the bytes;
    // DEEPINFER_BF16_QUERIES=0 keeps f32 for A/B timing); ref and cpu keep f32, the precision of the
    // fixtures' native simulation (tests/model/golden_logits_test.cpp: with bf16 q on the cpu, deepinfer's
    // median distance to it went from 0.63 to 0.85 of its distance to fp32, past the test's 0.8).
    virtual bool bf16_queries() const { return false; }

    // Fused pairs: each computes what its two calls in order compute, which is what these defaults do (so
    // ref, cpu and the compare and profile wrappers run and check the parts one by one). A backend may run
    // a pair in one launch, as a kernel variant of the pair's name with the two calls as its fallback; the
    // second op reads the first one's output (norm.x is pre.x / head.out, rope.x is norm.y, post.a is
    // add.out), which each override checks before it fuses.
    virtual void rms_norm_rope(const RmsNormArgs& norm, const RopeArgs& r) {
        rms_norm(norm);
        rope(r);
    }
    // Several independent rms_norm_rope pairs (job i: norms[i] then ropes[i]; no job reads another's
    // output), as rms_norm_rope() on each, which is what this default does; a backend may run them in one
    // launch (the compressor entries that the step's sequences close).
    virtual void rms_norm_ropes(std::span<const RmsNormArgs> norms, std::span<const RopeArgs> ropes) {
        DI_CHECK(norms.size() == ropes.size(), "rms_norm_ropes: {} norms, {} ropes", norms.size(),
                 ropes.size());
        for (size_t i = 0; i < norms.size(); ++i) rms_norm_rope(norms[i], ropes[i]);
    }
    virtual void mhc_pre_norm(const MhcPreArgs& pre, const RmsNormArgs& norm) {
        mhc_pre(pre);
        rms_norm(norm);
    }
    virtual void hc_head_norm(const HcHeadArgs& head, const RmsNormArgs& norm) {
        hc_head(head);
        rms_norm(norm);
    }
    virtual void add_mhc_post(const AddArgs& sum, const MhcPostArgs& post) {
        add(sum);
        mhc_post(post);
    }
};

}  // namespace di::ops
