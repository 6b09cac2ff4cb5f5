// compresses(), indexer_topks() and rms_norm_ropes(): several sequences' calls at once (one launch or launch
// pair each on CUDA) give bit for bit what compress(), indexer_topk() and rms_norm_rope() give on each alone,
// which cuda_attention_test.cpp and cuda_fused_test.cpp check against the reference; mixed shapes in one
// batch (the compressor table's cases: decode and prefill chunks, windows closing or not).
#include <cstring>
#include <span>

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
    // tiled takes the jobs of >= 256 entries, warp_heads the rest: one batched launch pair each
    auto counts = [&] {
        return b.gpu->dispatch_count("indexer_topk", "tiled") +
               b.gpu->dispatch_count("indexer_topk", "warp_heads");
    };
    const int64_t before = counts(), tiled_before = b.gpu->dispatch_count("indexer_topk", "tiled");
    b.gpu->indexer_topks(all);
    EXPECT_EQ(counts() - before, int64_t(n));
    EXPECT_EQ(b.gpu->dispatch_count("indexer_topk", "tiled") - tiled_before, 2);  // T = 1000 and 4096
    for (size_t i = 0; i < n; ++i)
        EXPECT_TRUE(same_bits<int32_t>(picks_alone[i], picks_batched[i])) << "job " << i;
}

struct NormRopeJob {
    int64_t n, heads, hd, half;
    DType wdt;
    bool weighted = true;
};

// rms_norm_ropes() over `spec` gives each job's rms_norm_rope() alone bit for bit, every job on the fused
// kernel.
void check_norm_ropes(std::span<const NormRopeJob> spec) {
    auto& b = backends();
    const size_t n = spec.size();
    std::vector<Pair> x_alone, x_batched, w, pos, freq;
    for (const NormRopeJob& j : spec) {
        x_alone.push_back(Pair(DType::kF32, {j.n * j.heads, j.hd}));
        fill_uniform(x_alone.back(), -4, 4);
        x_batched.push_back(Pair(DType::kF32, {j.n * j.heads, j.hd}));
        copy_into(x_alone.back(), x_batched.back());
        w.push_back(Pair(j.wdt, {j.hd}));
        fill_uniform(w.back(), 0.5, 1.5);
        pos.push_back(Pair(DType::kI32, {j.n}));
        auto* p = static_cast<int32_t*>(pos.back().hv().data);
        for (int64_t t = 0; t < j.n; ++t) p[t] = int32_t(4 * (1000 * int64_t(pos.size()) + t));
        pos.back().upload();
        freq.push_back(Pair(DType::kF32, {j.half}));
        fill_uniform(freq.back(), 0.0, 1.0);
    }
    auto norm = [&](Pair& x, size_t i) {
        return ops::RmsNormArgs{
            .x = x.dv(), .weight = spec[i].weighted ? w[i].dv() : TensorView{}, .y = x.dv(), .eps = 1e-6f};
    };
    auto rope = [&](Pair& x, size_t i) {
        const NormRopeJob& j = spec[i];
        ops::RopeArgs r;
        r.x = x.dv().reshape({j.n, j.heads, j.hd});
        r.positions = pos[i].dv(), r.inv_freq = freq[i].dv(), r.mscale = 1.25f;
        return r;
    };
    std::vector<ops::RmsNormArgs> norms;
    std::vector<ops::RopeArgs> ropes;
    for (size_t i = 0; i < n; ++i) {
        b.gpu->rms_norm_rope(norm(x_alone[i], i), rope(x_alone[i], i));
        norms.push_back(norm(x_batched[i], i));
        ropes.push_back(rope(x_batched[i], i));
    }
    const int64_t before = b.gpu->dispatch_count("rms_norm_rope", "fused");
    b.gpu->rms_norm_ropes(norms, ropes);
    EXPECT_EQ(b.gpu->dispatch_count("rms_norm_rope", "fused") - before, int64_t(n));
    for (size_t i = 0; i < n; ++i) EXPECT_TRUE(same_bits<float>(x_alone[i], x_batched[i])) << "job " << i;
}

// The compressor entries that a step's sequences close: each job its own rows, positions and width class
// (512-wide attention entries, 128-wide indexer entries), one launch for all (a table copied to the device).
TEST(CudaBatchedState, RmsNormRopesEqualEachAlone) {
    SKIP_WITHOUT_GPU();
    const NormRopeJob spec[] = {{1, 1, 512, 32, DType::kBF16}, {3, 1, 512, 32, DType::kBF16},
                                {1, 1, 512, 32, DType::kF32},  {2, 4, 128, 32, DType::kBF16},
                                {1, 1, 64, 8, DType::kF32},    {5, 1, 512, 32, DType::kBF16},
                                {2, 3, 18, 4, DType::kF32}};  // a width off the warp kernel: each job alone
    check_norm_ropes(spec);
}

// An attention layer's q (64 heads of 512, unweighted) and kv (one row, weighted) at batch 1, 16 and 5, and
// four jobs (the most the kernel's argument carries): the jobs as the launch's argument, no table.
TEST(CudaBatchedState, QueryAndKvNormRopesInOneLaunch) {
    SKIP_WITHOUT_GPU();
    for (const int64_t n : {1, 16, 5}) {
        const NormRopeJob spec[] = {{n, 64, 512, 32, DType::kF32, false}, {n, 1, 512, 32, DType::kBF16}};
        check_norm_ropes(spec);
    }
    const NormRopeJob four[] = {{2, 64, 512, 32, DType::kF32, false},
                                {2, 1, 512, 32, DType::kBF16},
                                {3, 8, 128, 32, DType::kF32, false},
                                {1, 1, 512, 32, DType::kF32}};
    check_norm_ropes(four);
}

}  // namespace
}  // namespace di::gputest
