// DeepSeek-V4 forward (spec section 3; ref: transformers 5.17 DeepseekV4Model). Reads top to bottom:
// embed -> per layer (mHC, attention, mHC, MoE) -> hc head -> norm -> lm head.
#include "model/deepseek_v4.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

#include "model/deepseek_v4_step.h"
#include "model/moe_exchange.h"
#include "ops/act_quant.h"

namespace di::model {

using namespace di::ops;

// A compressor's projections of the step's tokens (the part that does not depend on the sequences).
struct DeepseekV4::Projected {
    TensorView kv, gate;  // f32 [n, width]
};

namespace {
std::atomic<int64_t> next_model_id{1};
}

std::unique_ptr<SequenceState> DeepseekV4::new_state(int64_t capacity) {
    return std::make_unique<DeepseekV4State>(cfg_, *be_, capacity);
}

DeepseekV4::DeepseekV4(ModelConfig cfg, ModelWeights weights, Backend& backend)
    : cfg_(std::move(cfg)),
      w_(std::move(weights)),
      be_(&backend),
      ws_(backend.allocator()),
      vws_(backend.allocator()),
      id_(next_model_id++) {
    auto table = [&](const RopeTable& t, Tensor& dst, float& mscale) {
        RopeFreqs f = rope_freqs(t, cfg_.rope_dim, cfg_.max_position_embeddings);
        dst = Tensor(be_->allocator(), DType::kF32, {int64_t(f.inv_freq.size())});
        be_->copy(dst.view(),
                  TensorView::contiguous(f.inv_freq.data(), DType::kF32, {int64_t(f.inv_freq.size())}));
        mscale = f.mscale;
    };
    table(cfg_.rope_main, inv_freq_main_, mscale_main_);
    table(cfg_.rope_compress, inv_freq_compress_, mscale_compress_);
}

std::vector<float> DeepseekV4::forward(std::span<const SeqChunk> chunks) {
    Step s;
    const TensorView logits = run_step(chunks, s);
    std::vector<float> out(size_t(logits.numel()));
    be_->copy(TensorView::contiguous(out.data(), DType::kF32, {logits.shape[0], logits.shape[1]}), logits);
    be_->synchronize();
    for (size_t c = 0; c < chunks.size(); ++c) chunks[c].state->advance(s.len[c]);
    return out;
}

GreedyRows DeepseekV4::forward_greedy(std::span<const SeqChunk> chunks) {
    Step s;
    s.greedy = true;
    const TensorView logits = run_step(chunks, s);
    const int64_t m = s.picks.shape[1];
    std::vector<int32_t> both(size_t(2 * m));  // ids, then the first non-finite indices: one copy
    be_->copy(TensorView::contiguous(both.data(), DType::kI32, {2, m}), s.picks);
    be_->synchronize();
    GreedyRows g{std::vector<int32_t>(both.begin(), both.begin() + m),
                 std::vector<int32_t>(both.begin() + m, both.end()), std::vector<float>(size_t(m), 0.0f)};
    for (int64_t r = 0; r < m; ++r)  // a broken row: its bad logit for the caller's error message
        if (const int32_t b = g.bad[size_t(r)]; b >= 0)
            be_->copy(TensorView::contiguous(&g.bad_value[size_t(r)], DType::kF32, {1, 1}),
                      columns(logits.rows(r, 1), b, 1));
    be_->synchronize();
    for (size_t c = 0; c < chunks.size(); ++c) chunks[c].state->advance(s.len[c]);
    return g;
}

CandidateRows DeepseekV4::forward_candidates(std::span<const SeqChunk> chunks,
                                             std::span<const float> temperatures, int64_t per_row) {
    Step s;
    const TensorView logits = run_step(chunks, s);
    const int64_t m = logits.shape[0], C = std::min(per_row, logits.shape[1]);
    DI_CHECK(int64_t(temperatures.size()) == m, "{} temperatures for {} logits rows", temperatures.size(), m);
    CandidateRows c = CandidateRows::sized(m, C);
    if (m > 0) {  // after the head segment: buffers of the step's varying sizes
        const TensorView temp = vws_.take(DType::kF32, {m}), ids = vws_.take(DType::kI32, {m, C});
        const TensorView values = vws_.take(DType::kF32, {m, C}), sums = vws_.take(DType::kI64, {m, 3});
        const TensorView bad = vws_.take(DType::kI32, {m});
        be_->copy(temp, TensorView::contiguous(const_cast<float*>(temperatures.data()), DType::kF32, {m}));
        be_->top_candidates(
            {.x = logits, .temperature = temp, .ids = ids, .values = values, .sums = sums, .bad = bad});
        be_->copy(TensorView::contiguous(c.ids.data(), DType::kI32, {m, C}), ids);
        be_->copy(TensorView::contiguous(c.logits.data(), DType::kF32, {m, C}), values);
        be_->copy(TensorView::contiguous(c.sums.data(), DType::kI64, {m, 3}), sums);  // doubles' bits
        be_->copy(TensorView::contiguous(c.bad.data(), DType::kI32, {m}), bad);
    }
    be_->synchronize();
    step_logits_ = logits;
    for (size_t i = 0; i < chunks.size(); ++i) chunks[i].state->advance(s.len[i]);
    return c;
}

std::vector<float> DeepseekV4::step_logits_rows(std::span<const int64_t> rows) {
    const int64_t V = cfg_.vocab_size;
    std::vector<float> out(rows.size() * size_t(V));
    for (size_t i = 0; i < rows.size(); ++i) {
        DI_CHECK(rows[i] >= 0 && rows[i] < step_logits_.shape[0], "logits row {} of {}", rows[i],
                 step_logits_.shape[0]);
        be_->copy(TensorView::contiguous(out.data() + i * size_t(V), DType::kF32, {1, V}),
                  step_logits_.rows(rows[i], 1));
    }
    be_->synchronize();
    return out;
}

std::vector<float> DeepseekV4::step_logits_at(std::span<const int64_t> rows, std::span<const int32_t> ids) {
    const int64_t V = cfg_.vocab_size, m = step_logits_.shape[0], k = int64_t(ids.size());
    DI_CHECK(rows.size() == ids.size() && m * V <= INT32_MAX, "{} rows for {} ids, {} rows of the step",
             rows.size(), ids.size(), m);
    std::vector<float> out(static_cast<size_t>(k));
    if (k == 0) return out;
    std::vector<int32_t> at(static_cast<size_t>(k));  // flat indices into the step's [m, V] logits
    for (size_t i = 0; i < at.size(); ++i) {
        DI_CHECK(rows[i] >= 0 && rows[i] < m && ids[i] >= 0 && ids[i] < V, "logit {} of row {} of {}", ids[i],
                 rows[i], m);
        at[i] = int32_t(rows[i] * V + ids[i]);
    }
    const TensorView got = vws_.take(DType::kF32, {k, 1});
    be_->embed({.tokens = upload_i32(vws_, *be_, at), .table = step_logits_.reshape({m * V, 1}), .out = got});
    be_->copy(TensorView::contiguous(out.data(), DType::kF32, {k, 1}), got);
    be_->synchronize();
    return out;
}

TensorView DeepseekV4::run_step(std::span<const SeqChunk> chunks, Step& s) {
    const int64_t D = cfg_.hidden_dim, hc = cfg_.hc_mult;
    ws_.reset();
    vws_.reset();
    s.chunks = chunks;
    std::vector<int32_t> tokens, positions;
    for (const SeqChunk& c : chunks) {
        auto* st = dynamic_cast<DeepseekV4State*>(c.state);
        DI_CHECK(st != nullptr, "a chunk's state was not made by a DeepseekV4 model");
        s.states.push_back(st);
        s.row0.push_back(s.n);
        s.len.push_back(int64_t(c.tokens.size()));
        s.pos0.push_back(c.state->n_tokens());
        DI_CHECK(c.state->n_tokens() + int64_t(c.tokens.size()) <= c.state->capacity(),
                 "sequence over capacity {}", c.state->capacity());
        for (size_t i = 0; i < c.tokens.size(); ++i) {
            tokens.push_back(c.tokens[i]);
            positions.push_back(int32_t(c.state->n_tokens() + int64_t(i)));
        }
        s.n += int64_t(c.tokens.size());
    }
    take_step_buffers(s, tokens, positions);

    be_->set_scope("embed");
    begin_segment(s);
    for (int64_t j = 0; j < hc; ++j) {  // every stream starts as the embedding
        TensorView stream_j = s.streams.reshape({s.n, hc * D});
        be_->embed({.tokens = s.tokens, .table = w_.embed, .out = columns(stream_j, j * D, D)});
    }
    // a sub-layer's buffers are free once it is done: it leaves its output in the step's streams
    const Workspace::Mark layer = ws_.mark();
    for (int l = 0; l < int(cfg_.n_layers); ++l) {
        attention_layer(l, s);
        ws_.rewind(layer);
        ffn_layer(l, s);
        ws_.rewind(layer);
    }
    last_ = {s.streams, s.row0, s.len, s.states};

    be_->set_scope("head");
    const TensorView h = collapse_streams(w_.hc_head, w_.norm, s);
    std::vector<int64_t> rows, groups;  // the logits rows, and their counts by sequence
    for (size_t c = 0; c < chunks.size(); ++c) {
        if (chunks[c].all_logits)
            for (int64_t i = 0; i < s.len[c]; ++i) rows.push_back(s.row0[c] + i);
        else if (s.len[c] > 0)
            rows.push_back(s.row0[c] + s.len[c] - 1);
        const int64_t count = chunks[c].all_logits ? s.len[c] : std::min<int64_t>(s.len[c], 1);
        if (count > 0) groups.push_back(count);
    }
    const TensorView logits = head_logits(h, rows, groups);
    if (s.greedy) s.picks = greedy_picks(logits);
    be_->segment_end();
    step_rows_ = {}, step_n_ = -1;  // Step::len goes with the step
    return logits;
}

void DeepseekV4::take_step_buffers(Step& s, const std::vector<int32_t>& tokens,
                                   const std::vector<int32_t>& positions) {
    const int64_t D = cfg_.hidden_dim, hc = cfg_.hc_mult;
    step_rows_ = s.len, step_n_ = s.n;
    s.tokens = upload_i32(ws_, *be_, tokens);
    s.positions = upload_i32(ws_, *be_, positions);
    s.streams = ws_.take(stream_dtype(), {s.n, hc, D});
    s.spare = ws_.take(stream_dtype(), {s.n, hc, D});
    s.x = ws_.take(DType::kF32, {s.n, D});
    s.post = ws_.take(DType::kF32, {s.n, hc});
    s.comb = ws_.take(DType::kF32, {s.n, hc, hc});
}

TensorView DeepseekV4::collapse_streams(const HcWeights& head, const TensorView& norm, const Step& s) {
    const float eps = float(cfg_.rms_norm_eps);
    const TensorView h = ws_.take(DType::kF32, {s.n, cfg_.hidden_dim});
    be_->hc_head_norm({.streams = s.streams,
                       .fn = head.fn,
                       .base = head.base,
                       .scale = head.scale,
                       .out = h,
                       .norm_eps = eps,
                       .hc_eps = float(cfg_.hc_eps)},
                      {.x = h, .weight = norm, .y = h, .eps = eps});
    return h;
}

TensorView DeepseekV4::head_logits(const TensorView& h, std::span<const int64_t> rows,
                                   std::span<const int64_t> groups) {
    const int64_t m = int64_t(rows.size());
    TensorView sel = h;
    if (m != h.shape[0]) {
        sel = ws_.take(DType::kF32, {m, cfg_.hidden_dim});
        for (int64_t i = 0; i < m; ++i) be_->copy(sel.rows(i, 1), h.rows(rows[size_t(i)], 1));
    }
    const TensorView logits = ws_.take(DType::kF32, {m, cfg_.vocab_size});
    LinearArgs head = lin(sel, w_.head, logits);
    head.row_groups = groups;
    be_->linear(head);
    return logits;
}

TensorView DeepseekV4::greedy_picks(const TensorView& logits) {
    const int64_t m = logits.shape[0];
    const TensorView picks = ws_.take(DType::kI32, {2, m});
    be_->argmax({.x = logits, .ids = picks.rows(0, 1).reshape({m}), .bad = picks.rows(1, 1).reshape({m})});
    return picks;
}

// Everything the calls of a segment depend on: the model, which segment, the precision, the step's layout
// (chunk lengths, which rows give logits) and the workspace's state, which fixes every address taken from
// it. Positions, state rows and entry counts are not in it: the ops that use them run between segments.
void DeepseekV4::begin_segment(Step& s) {
    std::vector<int64_t> key = {id_,
                                s.segment++,
                                int64_t(precision_),
                                s.n,
                                int64_t(ws_.generation()),
                                int64_t(ws_.used()),
                                s.greedy ? 1 : 0};
    for (size_t c = 0; c < s.chunks.size(); ++c)
        key.push_back(s.len[c] * 2 + (s.chunks[c].all_logits ? 1 : 0));
    be_->segment_begin(key);
}

TensorView DeepseekV4::entry_positions(int64_t rate, int64_t first, int64_t count) {
    Tensor& t = entry_pos_[rate];
    const int64_t need = first + count;
    if (t.empty() || t.view().numel() < need) {  // grows by doubling; uploads happen between segments
        const int64_t size = std::max<int64_t>(need, 2 * (t.empty() ? 512 : t.view().numel()));
        std::vector<int32_t> host(static_cast<size_t>(size));
        for (int64_t i = 0; i < size; ++i) host[size_t(i)] = int32_t(i * rate);
        t = Tensor(be_->allocator(), DType::kI32, {size});
        be_->copy(t.view(), TensorView::contiguous(host.data(), DType::kI32, {size}));
    }
    return t.view().rows(first, count);
}

void DeepseekV4::set_expert_parallel(parallel::Communicator* comm, ExpertPartition experts) {
    DI_CHECK(comm == nullptr || (comm->rank() == experts.rank && comm->size() == experts.size),
             "rank {} of {} with the experts of rank {} of {}", comm ? comm->rank() : 0,
             comm ? comm->size() : 1, experts.rank, experts.size);
    DI_CHECK(comm == nullptr || comm->device_memory() == (be_->allocator().device() != Device::kHost),
             "expert parallelism on the {} backend needs a communicator of {} memory", be_->name(),
             be_->allocator().device() == Device::kHost ? "host" : "device");
    comm_ = comm;
    experts_ = experts;
}

// The routed experts: one call, or with expert parallelism the exchange of model/moe_exchange.h.
void DeepseekV4::routed_experts(MoeArgs m, int64_t n) {
    if (comm_ == nullptr || comm_->size() == 1) return be_->moe(m);
    exchange_routed_experts(*be_, vws_, *comm_, experts_, m, n, cfg_.n_experts_active, cfg_.hidden_dim);
}

void DeepseekV4::idle_step() {
    DI_CHECK(comm_ != nullptr, "idle_step without expert parallelism");
    ws_.reset();
    vws_.reset();
    for (int l = 0; l < int(cfg_.n_layers); ++l) {
        be_->set_scope(fmt::format("layer {} / moe", l));
        routed_experts(moe_args(l, {}, {}, {}, {}), 0);
    }
}

void DeepseekV4::idle_draft() {
    DI_CHECK(comm_ != nullptr && w_.mtp.has_value(), "idle_draft without expert parallelism or a drafter");
    be_->set_scope("mtp / moe");
    routed_experts(moe_args(int(cfg_.n_layers), {}, {}, {}, {}), 0);
}

MoeArgs DeepseekV4::moe_args(int l, const TensorView& x, const TensorView& ids, const TensorView& weights,
                             const TensorView& out) const {
    const FfnWeights& fw = block(l).ffn;
    const int64_t D = cfg_.hidden_dim;
    // native: the experts' inputs quantised as DeepSeek runs its FP8 x FP4 (and FP8 x FP8) expert GEMMs
    const auto placed = std::find_if(fw.experts.begin(), fw.experts.end(), [](const ops::ExpertWeights& e) {
        return !e.w1.empty();  // expert parallelism leaves the other ranks' experts empty
    });
    const bool quant = precision_ == Precision::kNative && placed != fw.experts.end() &&
                       placed->w1.format != ops::WeightFormat::kDense && D % ops::kActBlock == 0 &&
                       placed->w1.out_dim % ops::kActBlock == 0;
    return {
        .x = x,
        .ids = ids,
        .weights = weights,
        .experts = fw.experts.data(),
        .n_experts = int64_t(fw.experts.size()),
        .out = out,
        .limit = cfg_.swiglu_limit > 0 ? float(cfg_.swiglu_limit) : std::numeric_limits<float>::infinity(),
        .act = quant ? ops::ActQuant::kFp8Block128 : ops::ActQuant::kNone,
        .row_groups = x.shape[0] == step_n_ ? step_rows_ : std::span<const int64_t>{}};
}

MhcPreArgs DeepseekV4::mhc_pre_args(const HcWeights& hw, const Step& s) const {
    return {.streams = s.streams,
            .fn = hw.fn,
            .base = hw.base,
            .scale = hw.scale,
            .x = s.x,
            .post = s.post,
            .comb = s.comb,
            .norm_eps = float(cfg_.rms_norm_eps),
            .hc_eps = float(cfg_.hc_eps),
            .sinkhorn_iters = int(cfg_.hc_sinkhorn_iters),
            .tf32 = precision_ == Precision::kNative};
}

LinearArgs DeepseekV4::lin(const TensorView& x, const QWeight& w, const TensorView& y) const {
    LinearArgs a{.x = x, .w = w, .y = y};
    if (x.shape[0] == step_n_) a.row_groups = step_rows_;
    if (precision_ == Precision::kNative && w.format == ops::WeightFormat::kFp8Block &&
        w.in_dim % ops::kActBlock == 0)
        a.act = ops::ActQuant::kFp8Block128;
    return a;
}

DeepseekV4::Projected DeepseekV4::project(const CompressorWeights& cw, Step& s, const TensorView& y,
                                          int64_t width, std::vector<LinearArgs>& jobs) {
    Projected p{ws_.take(DType::kF32, {s.n, width}), ws_.take(DType::kF32, {s.n, width})};
    jobs.push_back(lin(y, cw.wkv, p.kv));
    jobs.push_back(lin(y, cw.wgate, p.gate));
    return p;
}

void DeepseekV4::compress_into(const CompressorWeights& cw, const Projected& p, int l, bool index, Step& s,
                               int64_t rate, bool overlap, int64_t d, const RopeArgs& rope_proto,
                               std::vector<int64_t>& n_entries) {
    n_entries.assign(s.chunks.size(), 0);
    std::vector<CompressArgs> jobs;  // job c: chunk c
    for (size_t c = 0; c < s.chunks.size(); ++c) {
        LayerState& ls = s.states[c]->layer(l);
        CompressorState& st = index ? ls.index : ls.comp;
        const int64_t L = s.len[c], pos0 = s.pos0[c], before = pos0 / rate;
        const int64_t n_new = CompressArgs::n_new(pos0, L, rate);
        jobs.push_back({.kv = p.kv.rows(s.row0[c], L),
                        .gate = p.gate.rows(s.row0[c], L),
                        .bias = cw.ape,
                        .buf_kv = st.buf_kv,
                        .buf_gate = st.buf_gate,
                        .ovl_kv = st.ovl_kv,
                        .ovl_gate = st.ovl_gate,
                        .out = st.entries.rows(before, n_new),
                        .pos0 = pos0,
                        .rate = rate,
                        .overlap = overlap});
        n_entries[c] = before + n_new;
    }
    be_->compresses(jobs);  // each sequence its own state
    // A chunk with drafts keeps every token in its buffer slot (position % rate), also those of a window the
    // chunk closes, which compress leaves out: after an undo that window closes again and reads its earlier
    // tokens from there. (Tokens of the open window compress has stored itself.)
    std::vector<ops::Backend::CopyPair> kept;  // one launch for the step's chunks on a GPU
    for (size_t c = 0; c < jobs.size(); ++c) {
        if (s.states[c]->undo_pending() == 0) continue;
        const int64_t L = s.len[c], pos0 = s.pos0[c], open_start = (pos0 + L) / rate * rate;
        for (int64_t t = std::max<int64_t>(0, L - rate); t < std::min(L, open_start - pos0); ++t) {
            const int64_t slot = (pos0 + t) % rate;
            kept.push_back({jobs[c].buf_kv.rows(slot, 1), jobs[c].kv.rows(t, 1)});
            kept.push_back({jobs[c].buf_gate.rows(slot, 1), jobs[c].gate.rows(t, 1)});
        }
    }
    be_->copy_many(kept);
    std::vector<RmsNormArgs> norms;  // the new entries of every sequence that closed a window
    std::vector<RopeArgs> ropes;
    for (size_t c = 0; c < jobs.size(); ++c) {
        const TensorView& out = jobs[c].out;
        const int64_t n_new = out.shape[0];
        if (n_new == 0) continue;
        RopeArgs r = rope_proto;  // an entry sits at the first position of its window
        r.x = as3d(out, n_new, 1, d);
        r.positions = entry_positions(rate, n_entries[c] - n_new, n_new);
        norms.push_back({.x = out, .weight = cw.norm, .y = out, .eps = float(cfg_.rms_norm_eps)});
        ropes.push_back(r);
    }
    be_->rms_norm_ropes(norms, ropes);
}

const LayerWeights& DeepseekV4::block(int l) const {
    if (l < int(cfg_.n_layers)) return w_.layers[size_t(l)];
    DI_CHECK(w_.mtp.has_value() && l == int(cfg_.n_layers), "block {} of {} layers", l, cfg_.n_layers);
    return w_.mtp->block;
}

AttnType DeepseekV4::attn_type(int l) const {
    return l < int(cfg_.n_layers) ? cfg_.attn_types[size_t(l)] : AttnType::kSliding;
}

namespace {
std::string block_scope(int l, int64_t n_layers, std::string_view part) {
    return l < n_layers ? fmt::format("layer {} / {}", l, part) : fmt::format("mtp / {}", part);
}
}  // namespace

void DeepseekV4::attention_layer(int l, Step& s) {
    const LayerWeights& lw = block(l);
    const AttentionWeights& aw = lw.attn;
    const AttnType type = attn_type(l);
    const int64_t NL = cfg_.n_layers;
    const int64_t n = s.n, D = cfg_.hidden_dim, H = cfg_.n_heads, hd = cfg_.head_dim;
    const int64_t G = cfg_.o_groups, R = cfg_.o_lora_rank;
    const float eps = float(cfg_.rms_norm_eps);
    const bool sliding = type == AttnType::kSliding, csa = type == AttnType::kCsa;
    const RopeArgs rope_proto{.x = {},  // each use sets its own
                              .positions = s.positions,
                              .inv_freq = sliding ? inv_freq_main_ : inv_freq_compress_,
                              .mscale = sliding ? mscale_main_ : mscale_compress_};

    be_->set_scope(block_scope(l, NL, "attention"));
    TensorView y = ws_.take(DType::kF32, {n, D});
    be_->mhc_pre_norm(mhc_pre_args(lw.hc_attn, s), {.x = s.x, .weight = lw.attn_norm, .y = y, .eps = eps});
    TensorView qr = ws_.take(DType::kF32, {n, cfg_.q_lora_rank});  // q residual, also feeds the indexer
    TensorView kv = ws_.take(DType::kF32, {n, hd});
    const LinearArgs from_y[] = {lin(y, aw.wq_a, qr), lin(y, aw.wkv, kv)};
    be_->linears(from_y);
    be_->rms_norm({.x = qr, .weight = aw.q_norm, .y = qr, .eps = eps});
    // the native precision's q as wq_b stores it in bf16 (q16), read in f32: by the attention tail where it
    // loads q, else cast into q before the norm
    const bool native = precision_ == Precision::kNative;
    TensorView q = ws_.take(DType::kF32, {n, H * hd});
    const TensorView q16 = native && be_->bf16_queries() ? ws_.take(DType::kBF16, {n, H * hd}) : TensorView{};
    be_->linear(lin(qr, aw.wq_b, q16.empty() ? q : q16));
    // q per head, unweighted; kv with its weight: two independent pairs, one call (one launch on cuda),
    // unless the backend's attention kernels take q's where they load it (then q's go to the attention tail)
    QueryPrep q_prep{.rope = rope_proto, .eps = eps, .src = q16.empty() ? TensorView{} : as3d(q16, n, H, hd)};
    q_prep.rope.x = as3d(q, n, H, hd);  // [n, H, hd]
    RopeArgs qkv_ropes[2] = {q_prep.rope, rope_proto};
    qkv_ropes[1].x = as3d(kv, n, 1, hd);
    const RmsNormArgs qkv_norms[2] = {
        {.x = q.reshape({n * H, hd}), .weight = {}, .y = q.reshape({n * H, hd}), .eps = eps},
        {.x = kv, .weight = aw.kv_norm, .y = kv, .eps = eps}};
    const bool tail = be_->fuses_attention_tail(s.len, H, hd, native);
    const int first = tail ? 1 : 0;
    if (!tail && !q16.empty()) be_->cast({.x = q16, .out = q});
    be_->rms_norm_ropes(std::span(qkv_norms).subspan(first), std::span(qkv_ropes).subspan(first));

    // The rest of the step-wide projections, then the per-sequence ops between two graph segments.
    const int64_t rate = sliding ? 0 : cfg_.compress_rate(l);
    const int64_t nIH = cfg_.index_heads, ihd = cfg_.index_dim;
    Projected comp, index;
    TensorView qi, iw;
    if (!sliding) {  // y's bf16 projections in one call: the compressor's, and the indexer's where CSA
        be_->set_scope(block_scope(l, NL, csa ? "compressor and indexer" : "compressor"));
        std::vector<LinearArgs> from_y_bf16;
        comp = project(aw.compressor, s, y, csa ? 2 * hd : hd, from_y_bf16);
        if (csa) {
            index = project(aw.index_compressor, s, y, 2 * ihd, from_y_bf16);
            iw = ws_.take(DType::kF32, {n, nIH});
            from_y_bf16.push_back(lin(y, aw.index_weights_proj, iw));
        }
        be_->linears(from_y_bf16);
    }
    if (csa) {
        be_->set_scope(block_scope(l, NL, "indexer"));
        qi = ws_.take(DType::kF32, {n, nIH * ihd});
        be_->linear(lin(qr, aw.index_wq_b, qi));
        RopeArgs ri = rope_proto;
        ri.x = as3d(qi, n, nIH, ihd);
        be_->rope(ri);
    }
    TensorView o = ws_.take(DType::kF32, {n, H, hd});
    // Where the tail quantises the output (native, for wo_a's fp8 activation blocks): e4m3 codes and their
    // scales, block-major ([blocks][n], as cuBLASLt reads them), read by the groups as pre-quantised x.
    const TensorView o2 = o.reshape({n, H * hd});
    const bool o_fp8 = tail && lin(o2, aw.wo_a, TensorView{}).act == ActQuant::kFp8Block128;
    ActQuantArgs o_quant;
    if (o_fp8) {
        o_quant = {.x = o2,
                   .q = ws_.take(DType::kF8E4M3, {n, H * hd}),
                   .scales = transposed(ws_.take(DType::kF32, {H * hd / kActBlock, n}))};
    }
    be_->segment_end();

    std::vector<int64_t> n_comp(s.chunks.size(), 0), n_index;
    std::vector<TensorView> picks(s.chunks.size());
    if (!sliding) {
        be_->set_scope(block_scope(l, NL, "compressor"));
        compress_into(aw.compressor, comp, l, false, s, rate, csa, hd, rope_proto, n_comp);
    }
    if (csa) {
        be_->set_scope(block_scope(l, NL, "indexer"));
        compress_into(aw.index_compressor, index, l, true, s, cfg_.csa_rate, true, ihd, rope_proto, n_index);
        std::vector<IndexerTopkArgs> jobs;
        for (size_t c = 0; c < s.chunks.size(); ++c) {
            const int64_t T = n_index[c], L = s.len[c];
            if (T == 0 || L == 0) continue;
            picks[c] = vws_.take(DType::kI32, {L, std::min(cfg_.index_topk, T)});
            jobs.push_back({.q = as3d(qi, n, nIH, ihd).rows(s.row0[c], L),
                            .weights = iw.rows(s.row0[c], L),
                            .keys = s.states[c]->layer(l).index.entries.rows(0, T),
                            .picks = picks[c],
                            .pos0 = s.pos0[c],
                            .rate = cfg_.csa_rate,
                            .weight_scale = float(1.0 / std::sqrt(double(nIH))),
                            .score_scale = float(1.0 / std::sqrt(double(ihd))),
                            .f16 = precision_ == Precision::kNative});
        }
        be_->indexer_topks(jobs);
    }

    be_->set_scope(block_scope(l, NL, "attention"));
    const TensorView q3 = as3d(q, n, H, hd);
    std::vector<AttentionArgs> attn;
    std::vector<WindowStoreArgs> stores;
    for (size_t c = 0; c < s.chunks.size(); ++c) {
        const int64_t L = s.len[c], pos0 = s.pos0[c];
        if (L == 0) continue;
        LayerState& ls = s.states[c]->layer(l);
        AttentionArgs a;
        a.q = q3.rows(s.row0[c], L);
        a.ring = ls.ring;
        a.kv = kv.rows(s.row0[c], L);
        a.sinks = aw.sinks;
        a.out = o.rows(s.row0[c], L);
        a.pos0 = pos0;
        a.n_cached = std::min(pos0, cfg_.window - 1);
        a.window = cfg_.window;
        a.scale = float(1.0 / std::sqrt(double(hd)));
        a.f16 = native;
        if (n_comp[c] > 0) {
            a.comp = ls.comp.entries.rows(0, n_comp[c]);
            a.comp_mask = csa ? CompMask::kPicks : CompMask::kCausal;
            a.rate = rate;
            if (csa) a.picks = picks[c];
            if (csa && picks[c].empty()) a.comp_mask = CompMask::kNone;
        }
        attn.push_back(a);
        stores.push_back({.kv = a.kv, .ring = ls.ring, .pos0 = pos0});
    }
    RopeArgs ro = rope_proto;  // inverse rotation of the output at the query positions
    ro.x = o;
    ro.inverse = true;
    // every chunk reads its ring before any store writes one
    be_->attentions_stored(attn, stores, ro, tail ? &q_prep : nullptr, o_fp8 ? &o_quant : nullptr);
    begin_segment(s);

    // Grouped low-rank output projection: group g's (H/G)*hd channels -> R, then wo_b.
    TensorView u = ws_.take(DType::kF32, {n, G * R});
    const int64_t gw = H * hd / G;
    std::vector<LinearArgs> groups;
    for (int64_t g = 0; g < G; ++g)
        if (o_fp8) {
            LinearArgs a = lin(columns(o_quant.q, g * gw, gw), aw.wo_a.rows(g * R, R), columns(u, g * R, R));
            a.x_scales = columns(o_quant.scales, g * gw / kActBlock, gw / kActBlock);
            groups.push_back(a);
        } else {
            groups.push_back(lin(columns(o2, g * gw, gw), aw.wo_a.rows(g * R, R), columns(u, g * R, R)));
        }
    be_->linears(groups);
    TensorView a = ws_.take(DType::kF32, {n, D});
    be_->linear(lin(u, aw.wo_b, a));
    be_->mhc_post({.streams = s.streams, .a = a, .post = s.post, .comb = s.comb, .out = s.spare});
    std::swap(s.streams, s.spare);
}

void DeepseekV4::ffn_layer(int l, Step& s) {
    const LayerWeights& lw = block(l);
    const FfnWeights& fw = lw.ffn;
    const int64_t n = s.n, D = cfg_.hidden_dim, I = cfg_.moe_dim, k = cfg_.n_experts_active;
    const float eps = float(cfg_.rms_norm_eps);
    const float limit =
        cfg_.swiglu_limit > 0 ? float(cfg_.swiglu_limit) : std::numeric_limits<float>::infinity();

    be_->set_scope(block_scope(l, cfg_.n_layers, "moe"));
    TensorView y = ws_.take(DType::kF32, {n, D});
    be_->mhc_pre_norm(mhc_pre_args(lw.hc_ffn, s), {.x = s.x, .weight = lw.ffn_norm, .y = y, .eps = eps});
    TensorView logits = ws_.take(DType::kF32, {n, cfg_.n_experts});
    be_->linear(lin(y, fw.gate, logits));
    TensorView ids = ws_.take(DType::kI32, {n, k});
    TensorView weights = ws_.take(DType::kF32, {n, k});
    const bool hash = l < int(cfg_.n_layers) && cfg_.moe_types[size_t(l)] == MoeType::kHash;
    be_->route({.logits = logits,
                .bias = hash ? TensorView{} : fw.gate_bias,
                .tid2eid = hash ? fw.tid2eid : TensorView{},
                .tokens = s.tokens,
                .ids = ids,
                .weights = weights,
                .func = cfg_.score_func == ScoreFunc::kSigmoid ? ops::ScoreFunc::kSigmoid
                                                               : ops::ScoreFunc::kSqrtSoftplus,
                .scaling = float(cfg_.routed_scaling_factor)});
    TensorView routed = ws_.take(DType::kF32, {n, D});
    routed_experts(moe_args(l, y, ids, weights, routed), n);
    TensorView gate = ws_.take(DType::kF32, {n, I});
    TensorView up = ws_.take(DType::kF32, {n, I});
    const LinearArgs shared_up[] = {lin(y, fw.shared.w1, gate), lin(y, fw.shared.w3, up)};
    be_->linears(shared_up);
    be_->swiglu({.gate = gate, .up = up, .out = gate, .limit = limit});
    TensorView shared = ws_.take(DType::kF32, {n, D});
    be_->linear(lin(gate, fw.shared.w2, shared));
    be_->add_mhc_post({.a = routed, .b = shared, .out = routed},
                      {.streams = s.streams, .a = routed, .post = s.post, .comb = s.comb, .out = s.spare});
    std::swap(s.streams, s.spare);
}

}  // namespace di::model
