// Determinism: the same inputs give bit-identical outputs on two runs (no atomics in any accumulation;
// the indexer's atomics only count, and its winners are sorted afterwards).
#include "gpu_test_util.h"

namespace di::gputest {
namespace {

template <class F>
void expect_bit_identical(Pair& out, F&& run, const char* what) {
    out.poison();
    run();
    const auto first = out.device_as<uint32_t>();
    out.poison();
    run();
    EXPECT_TRUE(first == out.device_as<uint32_t>()) << what << ": two runs differ";
}

TEST(CudaDeterminism, TwoRunsBitIdentical) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto& g = *backends().gpu;
    Pair x(DType::kF32, {64, 1024}), w(DType::kF8E4M3, {4096, 1024}), s(DType::kE8M0, {32, 8}),
        y(DType::kF32, {64, 4096});
    fill_uniform(x), fill_fp8(w), fill_e8m0(s);
    ops::LinearArgs la{x.dv(), {ops::WeightFormat::kFp8Block, w.dv(), s.dv(), 4096, 1024}, y.dv()};
    expect_bit_identical(
        y, [&] { g.linear(la); }, "linear");

    Pair q(DType::kF32, {8, 64, 512}), ring(DType::kF32, {127, 512}), kv(DType::kF32, {8, 512});
    Pair comp(DType::kF32, {300, 512}), picks(DType::kI32, {8, 64}), sinks(DType::kF32, {64}),
        o(DType::kF32, {8, 64, 512});
    fill_uniform(q), fill_uniform(ring), fill_uniform(kv), fill_uniform(comp), fill_uniform(sinks);
    for (int64_t i = 0; i < 8 * 64; ++i) picks.hv().ptr<int32_t>()[i] = int32_t(rng()() % 300);
    picks.upload();
    ops::AttentionArgs aa{q.dv(),
                          ring.dv(),
                          kv.dv(),
                          comp.dv(),
                          picks.dv(),
                          sinks.dv(),
                          o.dv(),
                          2000,
                          127,
                          128,
                          ops::CompMask::kPicks,
                          4,
                          0.044f};
    expect_bit_identical(
        o, [&] { g.attention(aa); }, "attention");

    Pair iq(DType::kF32, {4, 64, 128}), iw(DType::kF32, {4, 64}), keys(DType::kF32, {2000, 128}),
        ip(DType::kI32, {4, 512});
    fill_uniform(iq), fill_uniform(iw), fill_uniform(keys);
    ops::IndexerTopkArgs ia{iq.dv(), iw.dv(), keys.dv(), ip.dv(), 9000, 4, 0.125f, 0.088f};
    expect_bit_identical(
        ip, [&] { g.indexer_topk(ia); }, "indexer_topk");
}

}  // namespace
}  // namespace di::gputest
