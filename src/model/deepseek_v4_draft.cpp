// Speculative decoding's drafter: the checkpoint's MTP block (spec section 6) over the rows each sequence
// kept in the last step. The row at position p takes the main model's last streams at p and the embedding
// of token p + 1, goes through one more block (its own sliding window: layer n_layers of the state), the
// block's hc head and norm and the main model's head, and its greedy pick guesses token p + 2. It runs only
// over kept rows, so its own state never needs an undo.
#include <algorithm>

#include "model/deepseek_v4_step.h"

namespace di::model {

using namespace di::ops;

namespace {
constexpr int kDraftSegments = 1 << 20;  // the drafter's graph segments, apart from the main step's
}  // namespace

std::vector<int32_t> DeepseekV4::draft(std::span<const DraftChunk> chunks) {
    return run_draft(chunks, nullptr);
}

std::vector<float> DeepseekV4::draft_logits(std::span<const DraftChunk> chunks) {
    std::vector<float> logits;
    run_draft(chunks, &logits);
    return logits;
}

std::vector<int32_t> DeepseekV4::run_draft(std::span<const DraftChunk> chunks, std::vector<float>* all) {
    DI_CHECK(w_.mtp.has_value(), "draft on a model loaded without its MTP block");
    DI_CHECK(chunks.size() == last_.len.size(), "{} draft chunks after a step of {}", chunks.size(),
             last_.len.size());
    const MtpWeights& mw = *w_.mtp;
    const int64_t D = cfg_.hidden_dim, hc = cfg_.hc_mult, V = cfg_.vocab_size;
    const float eps = float(cfg_.rms_norm_eps);
    std::vector<int32_t> out(chunks.size(), -1);

    Step s;
    std::vector<SeqChunk> seq;  // the drafter's chunks, over each kept part
    std::vector<size_t> of;     // the step's chunk of each
    std::vector<int32_t> tokens, positions;
    for (size_t c = 0; c < chunks.size(); ++c) {
        const int64_t kept = int64_t(chunks[c].next_tokens.size());
        DeepseekV4State* st = last_.states[c];
        DI_CHECK(kept <= last_.len[c], "chunk {} keeps {} of its {} rows", c, kept, last_.len[c]);
        if (kept == 0) continue;
        DI_CHECK(st->mtp_tokens() + kept == st->n_tokens(),
                 "chunk {}: the drafter has run over {} positions, the state holds {} after {} kept", c,
                 st->mtp_tokens(), st->n_tokens(), kept);
        seq.push_back({st, chunks[c].next_tokens, false});
        of.push_back(c);
        s.states.push_back(st);
        s.row0.push_back(s.n);
        s.len.push_back(kept);
        s.pos0.push_back(st->mtp_tokens());
        tokens.insert(tokens.end(), chunks[c].next_tokens.begin(), chunks[c].next_tokens.end());
        for (int64_t i = 0; i < kept; ++i) positions.push_back(int32_t(st->mtp_tokens() + i));
        s.n += kept;
    }
    if (s.n == 0) {  // nothing kept here: other ranks' drafter may still send this rank tokens
        if (comm_ != nullptr && comm_->size() > 1) idle_draft();
        return out;
    }
    const int64_t n = s.n;
    s.chunks = seq;
    s.segment = kDraftSegments;
    take_step_buffers(s, tokens, positions);
    // The main model's streams of the kept rows, before any segment opens: where they lie follows the last
    // step's layout, which the drafter's segment keys do not name.
    TensorView x_main = ws_.take(DType::kF32, {n, hc, D});
    for (size_t j = 0; j < of.size(); ++j) {
        const TensorView from = last_.streams.rows(last_.row0[of[j]], s.len[j]);
        const TensorView to = x_main.rows(s.row0[j], s.len[j]);
        if (from.dtype == DType::kF32)
            be_->copy(to, from);
        else
            be_->cast({.x = from.reshape({s.len[j] * hc, D}), .out = to.reshape({s.len[j] * hc, D})});
    }

    // Input streams: h_proj(hnorm(X)) per stream, plus e_proj(enorm(embedding of the next token)) in each.
    be_->set_scope("mtp / input");
    begin_segment(s);
    TensorView e = ws_.take(DType::kF32, {n, D}), e_proj = ws_.take(DType::kF32, {n, D});
    be_->embed({.tokens = s.tokens, .table = w_.embed, .out = e});
    be_->rms_norm({.x = e, .weight = mw.enorm, .y = e, .eps = eps});
    be_->linear(lin(e, mw.e_proj, e_proj));
    // the input streams built in f32, then stored in the streams' dtype
    const TensorView h32 = s.streams.dtype == DType::kF32 ? s.streams : ws_.take(DType::kF32, {n, hc, D});
    const TensorView x_rows = x_main.reshape({n * hc, D}), h_rows = h32.reshape({n * hc, D});
    be_->rms_norm({.x = x_rows, .weight = mw.hnorm, .y = x_rows, .eps = eps});
    std::vector<int64_t> stream_rows;  // hc rows a token: each sequence's rows a group of their own
    for (const int64_t len : s.len) stream_rows.push_back(len * hc);
    LinearArgs h_proj = lin(x_rows, mw.h_proj, h_rows);
    h_proj.row_groups = stream_rows;
    be_->linear(h_proj);
    const TensorView wide = h32.reshape({n, hc * D});
    for (int64_t j = 0; j < hc; ++j)
        be_->add({.a = columns(wide, j * D, D), .b = e_proj, .out = columns(wide, j * D, D)});
    if (h32.data != s.streams.data) be_->cast({.x = h_rows, .out = s.streams.reshape({n * hc, D})});

    attention_layer(int(cfg_.n_layers), s);
    ffn_layer(int(cfg_.n_layers), s);

    be_->set_scope("mtp / head");
    const TensorView h = collapse_streams(mw.hc_head, mw.norm, s);
    // the rows whose logits are computed, every kept one or each guess's, and their counts by sequence
    std::vector<int64_t> rows, groups;
    std::vector<size_t> wanted;  // the guesses' indices into `of`
    for (size_t j = 0; j < of.size(); ++j) {
        if (all) {
            for (int64_t i = 0; i < s.len[j]; ++i) rows.push_back(s.row0[j] + i);
            groups.push_back(s.len[j]);
        } else if (chunks[of[j]].want) {
            rows.push_back(s.row0[j] + s.len[j] - 1);
            groups.push_back(1);
        }
        if (chunks[of[j]].want) wanted.push_back(j);
    }
    const int64_t m = int64_t(rows.size());
    TensorView picks, logits;
    if (m > 0) {
        logits = head_logits(h, rows, groups);
        picks = greedy_picks(logits);
    }
    be_->segment_end();
    step_rows_ = {}, step_n_ = -1;
    if (m > 0) {
        std::vector<int32_t> both(size_t(2 * m));
        be_->copy(TensorView::contiguous(both.data(), DType::kI32, {2, m}), picks);
        if (all) {
            all->resize(size_t(m * V));
            be_->copy(TensorView::contiguous(all->data(), DType::kF32, {m, V}), logits);
        }
        be_->synchronize();
        for (size_t w = 0; w < wanted.size(); ++w) {  // a guess: its chunk's last row's pick, where finite
            const size_t j = wanted[w];
            const int64_t r = all ? s.row0[j] + s.len[j] - 1 : int64_t(w);
            if (both[size_t(m + r)] < 0) out[of[j]] = both[size_t(r)];
        }
    }
    for (size_t j = 0; j < of.size(); ++j) s.states[j]->advance_mtp(s.len[j]);
    return out;
}

}  // namespace di::model
