#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "ops/elementwise.h"
#include "ops/sampling.h"

namespace di::model {

void SequenceState::prepare_undo(int64_t drafts) {
    DI_CHECK(drafts == 0, "this model's state keeps nothing to undo {} drafted tokens", drafts);
}

void SequenceState::undo(int64_t rejected) {
    DI_CHECK(rejected == 0, "this model's state cannot take back {} tokens", rejected);
}

std::vector<int32_t> Model::draft(std::span<const DraftChunk> chunks) {
    DI_CHECK(chunks.empty(), "draft on a model without a drafter ({} chunks)", chunks.size());
    return {};
}

std::vector<float> Model::draft_logits(std::span<const DraftChunk> chunks) {
    DI_CHECK(chunks.empty(), "draft_logits on a model without a drafter ({} chunks)", chunks.size());
    return {};
}

GreedyRows Model::forward_greedy(std::span<const SeqChunk> chunks) {
    const std::vector<float> logits = forward(chunks);
    const int64_t V = config().vocab_size, rows = int64_t(logits.size()) / V;
    GreedyRows g{std::vector<int32_t>(size_t(rows)), std::vector<int32_t>(size_t(rows)),
                 std::vector<float>(size_t(rows), 0.0f)};
    for (int64_t r = 0; r < rows; ++r) {
        const size_t i = size_t(r);
        std::tie(g.ids[i], g.bad[i]) = ops::argmax_row(logits.data() + r * V, V);
        if (g.bad[i] >= 0) g.bad_value[i] = logits[size_t(r * V + g.bad[i])];
    }
    return g;
}

CandidateRows Model::forward_candidates(std::span<const SeqChunk> chunks, std::span<const float> temperatures,
                                        int64_t per_row) {
    step_logits_ = forward(chunks);
    const int64_t V = config().vocab_size, rows = int64_t(step_logits_.size()) / V, C = std::min(per_row, V);
    DI_CHECK(int64_t(temperatures.size()) == rows, "{} temperatures for {} logits rows", temperatures.size(),
             rows);
    CandidateRows c = CandidateRows::sized(rows, C);
    for (int64_t r = 0; r < rows; ++r)
        ops::top_candidates_row(step_logits_.data() + r * V, V, temperatures[size_t(r)], c.ids.data() + r * C,
                                c.logits.data() + r * C, C, c.sums.data() + 3 * r, c.bad.data() + r);
    return c;
}

std::vector<float> Model::step_logits_rows(std::span<const int64_t> rows) {
    const int64_t V = config().vocab_size;
    std::vector<float> out(rows.size() * size_t(V));
    for (size_t i = 0; i < rows.size(); ++i) {
        DI_CHECK(rows[i] >= 0 && (rows[i] + 1) * V <= int64_t(step_logits_.size()),
                 "logits row {} of the step", rows[i]);
        std::memcpy(out.data() + i * size_t(V), step_logits_.data() + rows[i] * V, size_t(V) * sizeof(float));
    }
    return out;
}

std::vector<float> Model::step_logits_at(std::span<const int64_t> rows, std::span<const int32_t> ids) {
    const int64_t V = config().vocab_size;
    DI_CHECK(rows.size() == ids.size(), "{} rows for {} ids", rows.size(), ids.size());
    std::vector<float> out(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t at = rows[i] * V + ids[i];
        DI_CHECK(rows[i] >= 0 && ids[i] >= 0 && ids[i] < V && at < int64_t(step_logits_.size()),
                 "logit {} of row {} of the step", ids[i], rows[i]);
        out[i] = step_logits_[size_t(at)];
    }
    return out;
}

}  // namespace di::model
