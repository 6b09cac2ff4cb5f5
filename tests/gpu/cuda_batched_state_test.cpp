// compresses() and indexer_topks(): several sequences' calls at once (one launch pair each on CUDA) give
// bit for bit what compress() and indexer_topk() give on each alone, which cuda_attention_test.cpp checks
// against the reference; mixed shapes in one batch (the compressor table's cases: decode and prefill chunks,
// windows closing or not).
#include <cstring>

#include "gpu_test_util.h"
#include "ops/op_cases.h"

namespace di::gputest {
namespace {

#define SKIP_WITHOUT_GPU() \
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

// p's host data into `to` (of p's shape), both copies.
void copy_into(const Pair& p, Pair& to) {
    std::memcpy(to.hv().data, p.hv().data, p.hv().nbytes());
    to.upload();
}

template <typename T>
bool same_bits(const Pair& a, const Pair& b) {
    const std::vector<T> x = a.device_as<T>(), y = b.device_as<T>();
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

using CompressJob = ops::cases::CompressCase;

// One sequence's compressor inputs and state.
struct CompressBufs {
    Pair kv, gate, bias, bkv, bgate, okv, ogate, out;
    void copy_into(CompressBufs& to) const {
        const std::initializer_list<std::pair<const Pair*, Pair*>> all = {
            {&kv, &to.kv},       {&gate, &to.gate}, {&bias, &to.bias},   {&bkv, &to.bkv},
            {&bgate, &to.bgate}, {&okv, &to.okv},   {&ogate, &to.ogate}, {&out, &to.out}};
        for (auto [from, dst] : all) gputest::copy_into(*from, *dst);
    }
};

TEST(CudaBatchedState, CompressesEqualEachAlone) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    const std::vector<CompressJob> spec =
        ops::cases::compress_cases(ops::cases::kCudaTest);  // all in one batch
    const size_t n = spec.size();
    std::vector<CompressBufs> alone, batched;
    for (const CompressJob& j : spec) {
        const int64_t width = j.overlap ? 2 * j.d : j.d,
                      n_new = ops::CompressArgs::n_new(j.pos0, j.L, j.rate);
        auto make = [&] {
            return CompressBufs{
                Pair(DType::kF32, {j.L, width}),    Pair(DType::kF32, {j.L, width}),
                Pair(DType::kF32, {j.rate, width}), Pair(DType::kF32, {j.rate, width}),
                Pair(DType::kF32, {j.rate, width}), Pair(DType::kF32, {j.rate, j.d}),
                Pair(DType::kF32, {j.rate, j.d}),   Pair(DType::kF32, {std::max<int64_t>(n_new, 1), j.d})};
        };
        CompressBufs c = make(), twin = make();
        fill_uniform(c.kv), fill_uniform(c.gate, -3, 3), fill_uniform(c.bias), fill_uniform(c.bkv);
        fill_uniform(c.bgate, -3, 3), fill_uniform(c.okv), fill_uniform(c.ogate, -3, 3);
        c.out.poison();
        c.copy_into(twin);
        alone.push_back(std::move(c));
        batched.push_back(std::move(twin));
    }
    auto args = [&](const CompressBufs& c, const CompressJob& j) {
        ops::CompressArgs a;
        a.kv = c.kv.dv(), a.gate = c.gate.dv(), a.bias = c.bias.dv(), a.buf_kv = c.bkv.dv();
        a.buf_gate = c.bgate.dv();
        if (j.overlap) a.ovl_kv = c.okv.dv(), a.ovl_gate = c.ogate.dv();
        a.out = c.out.dv().rows(0, ops::CompressArgs::n_new(j.pos0, j.L, j.rate));
        a.pos0 = j.pos0, a.rate = j.rate, a.overlap = j.overlap;
        return a;
    };
    std::vector<ops::CompressArgs> all;
    for (size_t i = 0; i < n; ++i) {
        b.gpu->compress(args(alone[i], spec[i]));
        all.push_back(args(batched[i], spec[i]));
    }
    b.gpu->compresses(all);
    for (size_t i = 0; i < n; ++i) {
        const std::string job = "job " + std::to_string(i);
        EXPECT_TRUE(same_bits<float>(alone[i].out, batched[i].out)) << job << " entries";
        EXPECT_TRUE(same_bits<float>(alone[i].bkv, batched[i].bkv)) << job << " buf_kv";
        EXPECT_TRUE(same_bits<float>(alone[i].bgate, batched[i].bgate)) << job << " buf_gate";
        EXPECT_TRUE(same_bits<float>(alone[i].okv, batched[i].okv)) << job << " ovl_kv";
        EXPECT_TRUE(same_bits<float>(alone[i].ogate, batched[i].ogate)) << job << " ovl_gate";
    }
}

TEST(CudaBatchedState, IndexerTopksEqualEachAlone) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    struct Job {
        int64_t L, T, k, pos0;
    };
    const int64_t H = 64, dim = 128, rate = 4;
    const Job spec[] = {{1, 5, 5, 20}, {1, 1000, 512, 4000},  {3, 64, 16, 253},
                        {1, 1, 1, 4},  {1, 4096, 512, 16390}, {2, 30, 30, 118}};
    const size_t n = std::size(spec);
    std::vector<Pair> q, w, keys, picks_alone, picks_batched;
    for (const Job& j : spec) {
        q.push_back(Pair(DType::kF32, {j.L, H, dim}));
        w.push_back(Pair(DType::kF32, {j.L, H}));
        keys.push_back(Pair(DType::kF32, {j.T, dim}));
        picks_alone.push_back(Pair(DType::kI32, {j.L, j.k}));
        picks_batched.push_back(Pair(DType::kI32, {j.L, j.k}));
        fill_uniform(q.back()), fill_uniform(w.back()), fill_uniform(keys.back());
        picks_alone.back().poison(), picks_batched.back().poison();
    }
    const float ws = 1.0f / std::sqrt(float(H)), ss = 1.0f / std::sqrt(float(dim));
    std::vector<ops::IndexerTopkArgs> all;
    for (size_t i = 0; i < n; ++i) {
        b.gpu->indexer_topk(
            {q[i].dv(), w[i].dv(), keys[i].dv(), picks_alone[i].dv(), spec[i].pos0, rate, ws, ss});
        all.push_back(
            {q[i].dv(), w[i].dv(), keys[i].dv(), picks_batched[i].dv(), spec[i].pos0, rate, ws, ss});
    }
    const int64_t before = b.gpu->dispatch_count("indexer_topk", "warp_heads");
    b.gpu->indexer_topks(all);
    EXPECT_EQ(b.gpu->dispatch_count("indexer_topk", "warp_heads") - before, int64_t(n));
    for (size_t i = 0; i < n; ++i)
        EXPECT_TRUE(same_bits<int32_t>(picks_alone[i], picks_batched[i])) << "job " << i;
}

}  // namespace
}  // namespace di::gputest
