// Whole-model A/B: the V4 forward on the cpu backend wrapped in CompareBackend, which runs every op also on
// ref with the same inputs and names the first divergent op. Fixture: v4_tiny_fp8 (official FP8/FP4 weight
// formats, CSA + HCA layers, indexer, hash and score routing). Prefill in chunks of 5, then 1-token decode
// steps. Tolerance 1e-5 of max|ref| per output: each op sees identical inputs, so only its own
// float-vs-double rounding shows (measured worst ~5e-7); discrete outputs (picks, route ids) must match
// exactly.
#include <span>

#include "cpu_test_util.h"
#include "ops/compare/compare_backend.h"
#include "runtime/model_loader.h"

namespace di::cputest {
namespace {

TEST(CpuModelAB, TinyFp8EveryOpAgreesWithRef) {
    ops::CpuBackend cpu(2);
    ops::CompareBackend cmp(cpu, 1e-5);
    auto m = runtime::load_model(std::string(DI_TEST_DATA) + "/v4_tiny_fp8", cmp);
    ASSERT_TRUE(m.ok()) << m.error().message;
    model::Model& model = **m;
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < 24; ++i) tokens.push_back(int32_t((i * 37 + 11) % model.config().vocab_size));
    const std::unique_ptr<model::SequenceState> st = model.new_state(int64_t(tokens.size()));
    for (size_t i = 0; i < tokens.size();) {
        const size_t n = i < 15 ? 5 : 1;  // 3 prefill chunks, then decode
        model::SeqChunk c{st.get(), std::span<const int32_t>(tokens.data() + i, n), false};
        model.forward(std::span<const model::SeqChunk>(&c, 1));
        i += n;
    }
    EXPECT_GT(cmp.ops_compared(), 100);
    EXPECT_FALSE(cmp.first_divergence().has_value()) << cmp.first_divergence()->describe();
    std::printf("model A/B: %lld ops, worst relative difference %.3g (%s)\n", (long long)cmp.ops_compared(),
                cmp.worst_relative(), cmp.worst_where().c_str());
}

}  // namespace
}  // namespace di::cputest
