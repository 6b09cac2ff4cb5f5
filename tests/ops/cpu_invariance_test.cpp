// Determinism of the cpu backend: a row's output bits do not depend on the batch it is in, its position
// and alignment in that batch, or the thread count (cpu_backend.h promises this). Compared bit for bit.
#include <cstring>

#include "cpu_test_util.h"

namespace di::cputest {
namespace {

using ops::WeightFormat;

bool same_bits(const float* a, const float* b, int64_t n) {
    return std::memcmp(a, b, size_t(n) * sizeof(float)) == 0;
}

TEST(CpuInvariance, LinearRowBitsIndependentOfBatchAndThreads) {
    const int64_t n = 29, in = 520, out = 301;  // in % 16 != 0: lane tail; out % 4 != 0: partial tile
    for (WeightFormat fmt : {WeightFormat::kDense, WeightFormat::kFp8Block, WeightFormat::kFp4Group}) {
        TestWeight tw = make_weight(fmt, out, in);
        Tensor x(host_allocator(), DType::kF32, {n, in});
        fill_uniform(x);
        std::vector<std::vector<float>> by_threads;
        for (int threads : {1, 2, 3, 5}) {
            ops::CpuBackend be(threads);
            Tensor y(host_allocator(), DType::kF32, {n, out});
            be.linear({x, tw.w, y});
            by_threads.push_back(to_vector(y));
        }
        for (size_t i = 1; i < by_threads.size(); ++i)
            EXPECT_TRUE(by_threads[i] == by_threads[0])
                << "format " << int(fmt) << ": thread count changed bits";
        // Each row alone, at an odd offset (a different alignment than in the batch), one thread.
        ops::CpuBackend one(1);
        std::vector<float> xs(size_t(in + 1)), ys(size_t(out + 3));
        for (int64_t r = 0; r < n; ++r) {
            std::memcpy(xs.data() + 1, x.view().ptr<float>() + r * in, size_t(in) * sizeof(float));
            one.linear({TensorView::contiguous(xs.data() + 1, DType::kF32, {1, in}), tw.w,
                        TensorView::contiguous(ys.data() + 3, DType::kF32, {1, out})});
            EXPECT_TRUE(same_bits(ys.data() + 3, by_threads[0].data() + r * out, out))
                << "format " << int(fmt) << " row " << r << ": batch changed bits";
        }
    }
}

TEST(CpuInvariance, MoeTokenBitsIndependentOfBatchAndThreads) {
    const int64_t n = 9, D = 72, I = 40, E = 5, k = 2;
    std::vector<TestWeight> store;
    std::vector<ops::ExpertWeights> experts;
    for (int64_t e = 0; e < E; ++e) {
        store.push_back(make_weight(WeightFormat::kFp4Group, I, D));
        store.push_back(make_weight(WeightFormat::kFp4Group, I, D));
        store.push_back(make_weight(WeightFormat::kFp4Group, D, I));
    }
    for (int64_t e = 0; e < E; ++e)
        experts.push_back({store[size_t(3 * e)].w, store[size_t(3 * e + 1)].w, store[size_t(3 * e + 2)].w});
    Tensor x(host_allocator(), DType::kF32, {n, D}), ids(host_allocator(), DType::kI32, {n, k}),
        wts(host_allocator(), DType::kF32, {n, k});
    fill_uniform(x);
    fill_uniform(wts, 0.1f, 1.0f);
    for (int64_t i = 0; i < n * k; ++i) ids.view().ptr<int32_t>()[i] = int32_t((i * 3 + i / k) % E);
    auto run = [&](ops::CpuBackend& be, int64_t t0, int64_t cnt) {
        Tensor out(host_allocator(), DType::kF32, {cnt, D});
        be.moe({x.view().rows(t0, cnt), ids.view().rows(t0, cnt), wts.view().rows(t0, cnt), experts.data(), E,
                out, 7.0f});
        return to_vector(out);
    };
    ops::CpuBackend one(1), three(3);
    const std::vector<float> batch = run(three, 0, n);
    EXPECT_TRUE(run(one, 0, n) == batch) << "thread count changed bits";
    for (int64_t t = 0; t < n; ++t)
        EXPECT_TRUE(same_bits(run(one, t, 1).data(), batch.data() + t * D, D))
            << "token " << t << ": batch changed bits";
}

TEST(CpuInvariance, AttentionAndMhcBitsIndependentOfThreads) {
    const int64_t L = 7, H = 16, hd = 264, window = 4, hc = 4, D = 520;  // big enough to run threaded
    Tensor q(host_allocator(), DType::kF32, {L, H, hd}), kv(host_allocator(), DType::kF32, {L, hd}),
        ring(host_allocator(), DType::kF32, {window - 1, hd}), sinks(host_allocator(), DType::kF32, {H});
    Tensor streams(host_allocator(), DType::kF32, {L, hc, D}),
        fn(host_allocator(), DType::kF32, {(2 + hc) * hc, hc * D}),
        base(host_allocator(), DType::kF32, {(2 + hc) * hc}), scale(host_allocator(), DType::kF32, {3});
    for (const Tensor* t : {&q, &kv, &ring, &sinks, &streams, &base, &scale}) fill_uniform(*t);
    fill_uniform(fn, -0.05f, 0.05f);
    std::vector<std::vector<float>> outs;
    for (int threads : {1, 3}) {
        ops::CpuBackend be(threads);
        Tensor o(host_allocator(), DType::kF32, {L, H, hd}), x(host_allocator(), DType::kF32, {L, D}),
            post(host_allocator(), DType::kF32, {L, hc}), comb(host_allocator(), DType::kF32, {L, hc, hc});
        ops::AttentionArgs a;
        a.q = q, a.ring = ring, a.kv = kv, a.sinks = sinks, a.out = o;
        a.pos0 = 9, a.n_cached = window - 1, a.window = window, a.scale = 0.1f;
        be.attention(a);
        be.mhc_pre({streams, fn, base, scale, x, post, comb});
        std::vector<float> all = to_vector(o);
        for (const Tensor* t : {&x, &post, &comb}) {
            const std::vector<float> v = to_vector(*t);
            all.insert(all.end(), v.begin(), v.end());
        }
        outs.push_back(all);
    }
    EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4), 0)
        << "thread count changed bits";
}

}  // namespace
}  // namespace di::cputest
