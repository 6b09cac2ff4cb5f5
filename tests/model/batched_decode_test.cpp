// Batched decode: one step serves several sequences of different lengths and positions, mixing prefill
// chunks and single-token decodes; every sequence's logits are bit-identical to running it alone
// (reference backend).
#include <gtest/gtest.h>

#include <cstring>

#include "model_fixture.h"

namespace di::test {
namespace {

TEST(BatchedDecode, BitIdenticalToAlone) {
    Fixture f = load_fixture("v4_tiny_fp32");
    ASSERT_TRUE(f.model);
    auto& m = *f.model;
    const auto& p = f.prompt;
    const int64_t V = m.config().vocab_size;
    // Three sequences: different prompt slices (so different lengths and positions).
    const std::vector<std::vector<int32_t>> seqs = {std::vector<int32_t>(p.begin(), p.begin() + 37),
                                                    std::vector<int32_t>(p.begin() + 5, p.begin() + 22),
                                                    std::vector<int32_t>(p.begin() + 11, p.end())};
    // Alone: prefill 9 tokens, then decode the rest one by one.
    std::vector<std::vector<float>> alone;
    for (const auto& s : seqs) {
        std::vector<int64_t> sched(s.size() - 8, 1);
        sched[0] = 9;
        alone.push_back(run_chunked(m, s, sched));
    }
    // Together: sequence i starts i*4 steps late, so steps mix prefill chunks and decodes.
    std::vector<std::unique_ptr<model::SequenceState>> st;
    std::vector<size_t> done(seqs.size(), 0);
    std::vector<std::vector<float>> together(seqs.size());
    for (const auto& s : seqs) st.push_back(m.new_state(int64_t(s.size())));
    for (int step = 0;; ++step) {
        std::vector<model::SeqChunk> chunks;
        std::vector<size_t> who;
        for (size_t i = 0; i < seqs.size(); ++i) {
            if (step < int(i) * 4 || done[i] == seqs[i].size()) continue;
            const size_t len = done[i] == 0 ? 9 : 1;
            chunks.push_back({st[i].get(), std::span<const int32_t>(seqs[i].data() + done[i], len), true});
            who.push_back(i);
        }
        if (chunks.empty()) {
            bool all = true;
            for (size_t i = 0; i < seqs.size(); ++i) all = all && done[i] == seqs[i].size();
            if (all) break;
            continue;
        }
        const std::vector<float> out = m.forward(chunks);
        size_t row = 0;
        for (size_t c = 0; c < chunks.size(); ++c) {
            const size_t n = chunks[c].tokens.size();
            together[who[c]].insert(together[who[c]].end(), out.begin() + long(row * size_t(V)),
                                    out.begin() + long((row + n) * size_t(V)));
            row += n;
            done[who[c]] += n;
        }
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
        ASSERT_EQ(alone[i].size(), together[i].size());
        EXPECT_EQ(0, std::memcmp(alone[i].data(), together[i].data(), alone[i].size() * sizeof(float)))
            << "sequence " << i << " differs when batched";
    }
}

}  // namespace
}  // namespace di::test
