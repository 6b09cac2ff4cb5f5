// Model::forward_greedy: the same step as forward(), returning each logits row's first maximum; checked
// against std::max_element over forward()'s logits of a twin sequence, step by step, in a batch that mixes
// an all-logits prefill chunk with decodes (reference backend, both fixtures' formats).
#include <gtest/gtest.h>

#include <algorithm>

#include "model_fixture.h"

namespace di::test {
namespace {

void check_fixture(const std::string& name) {
    Fixture f = load_fixture(name);
    ASSERT_TRUE(f.model);
    auto& m = *f.model;
    const int64_t V = m.config().vocab_size;
    const std::vector<int32_t> a(f.prompt.begin(), f.prompt.begin() + 12),
        b(f.prompt.begin() + 3, f.prompt.begin() + 9);
    // twin states: one pair driven by forward(), one by forward_greedy(), with the same tokens
    std::unique_ptr<model::SequenceState> la = m.new_state(40), lb = m.new_state(40), ga = m.new_state(40),
                                          gb = m.new_state(40);
    std::vector<int32_t> next_a(a), next_b(b);  // this step's tokens
    for (int step = 0; step < 6; ++step) {
        const bool all = step == 0;  // the first step: every row of a's prefill
        const model::SeqChunk lc[] = {{la.get(), next_a, all}, {lb.get(), next_b, false}};
        const model::SeqChunk gc[] = {{ga.get(), next_a, all}, {gb.get(), next_b, false}};
        const std::vector<float> logits = m.forward(lc);
        const model::GreedyRows picks = m.forward_greedy(gc);
        const size_t rows = logits.size() / size_t(V);
        ASSERT_EQ(picks.ids.size(), rows);
        ASSERT_EQ(picks.bad.size(), rows);
        for (size_t r = 0; r < rows; ++r) {
            const float* row = logits.data() + r * size_t(V);
            EXPECT_EQ(picks.ids[r], int32_t(std::max_element(row, row + V) - row))
                << name << " step " << step;
            EXPECT_EQ(picks.bad[r], -1) << name << " step " << step;
        }
        next_a = {picks.ids[rows - 2]};  // each sequence's last row
        next_b = {picks.ids[rows - 1]};
    }
}

TEST(GreedyPick, EqualsArgmaxOfForwardLogits) {
    check_fixture("v4_tiny_fp32");
    check_fixture("v4_tiny_fp8");
}

}  // namespace
}  // namespace di::test
