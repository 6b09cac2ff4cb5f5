#include "model/model.h"

#include "ops/elementwise.h"

namespace di::model {

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

}  // namespace di::model
