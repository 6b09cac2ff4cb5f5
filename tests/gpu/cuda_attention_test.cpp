// attention, compress and indexer_topk on CUDA vs ref, on V4-Flash shapes (64 heads x 512, window 128,
// CSA rate 4 / HCA rate 128, index 64 x 128, top-512) and small awkward ones.
#include <algorithm>
#include <cstring>
#include <set>

#include "gpu_test_util.h"

namespace di::gputest {
namespace {

#define SKIP_WITHOUT_GPU() \
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

struct AttnCase {
    const char* name;
    int64_t L, H, hd, window, pos0, n_cached;
    ops::CompMask mask;
    int64_t T = 0, rate = 1, k = 0;
};

const AttnCase kAttn[] = {
    {"decode_sliding_flash", 1, 64, 512, 128, 1000, 127, ops::CompMask::kNone},
    {"prefill_from_zero", 37, 4, 128, 8, 0, 0, ops::CompMask::kNone},
    {"decode_hca_flash", 3, 64, 512, 128, 500, 127, ops::CompMask::kCausal, 4, 128},
    {"prefill_hca_small_rate", 40, 4, 128, 8, 10, 7, ops::CompMask::kCausal, 12, 4},
    {"decode_csa_picks_flash", 2, 64, 512, 128, 4000, 127, ops::CompMask::kPicks, 1000, 4, 512},
    {"odd_head_dim_partial_ring", 3, 3, 96, 5, 2, 2, ops::CompMask::kPicks, 9, 4, 6},
    // split_kv takes S > 1 ranges here: duplicate picks across ranges, and a long HCA context
    {"decode_picks_split_small", 1, 4, 64, 16, 300, 15, ops::CompMask::kPicks, 50, 4, 40},
    {"decode_head_dim_30_fallback_only", 1, 5, 30, 8, 40, 7, ops::CompMask::kPicks, 10, 4, 5},
    {"decode_hca_flash_64k", 1, 64, 512, 128, 70000, 127, ops::CompMask::kCausal, 546, 128},
};

class CudaAttention : public ::testing::TestWithParam<AttnCase> {};

// f32 online softmax vs double two-pass: rel L2 well under 1e-5 (hd 512 dot products in f32)
TEST_P(CudaAttention, MatchesRef) {
    SKIP_WITHOUT_GPU();
    const AttnCase& c = GetParam();
    auto& b = backends();
    Pair q(DType::kF32, {c.L, c.H, c.hd}), ring(DType::kF32, {c.window - 1, c.hd}), kv(DType::kF32, {c.L, c.hd});
    Pair comp(DType::kF32, {std::max<int64_t>(c.T, 1), c.hd}), picks(DType::kI32, {c.L, std::max<int64_t>(c.k, 1)});
    Pair sinks(DType::kF32, {c.H}), out(DType::kF32, {c.L, c.H, c.hd});
    fill_uniform(q), fill_uniform(ring), fill_uniform(kv), fill_uniform(comp), fill_uniform(sinks, -2, 2);
    out.poison();
    for (int64_t i = 0; i < picks.hv().numel(); ++i)  // -1s and duplicates included
        picks.hv().ptr<int32_t>()[i] = int32_t(int64_t(rng()() % uint32_t(c.T + 1)) - 1);
    picks.upload();
    auto make = [&](bool d) {
        ops::AttentionArgs a;
        a.q = d ? q.dv() : q.hv();
        a.ring = d ? ring.dv() : ring.hv();
        a.kv = d ? kv.dv() : kv.hv();
        if (c.mask != ops::CompMask::kNone) a.comp = d ? comp.dv() : comp.hv();
        if (c.mask == ops::CompMask::kPicks) a.picks = d ? picks.dv() : picks.hv();
        a.sinks = d ? sinks.dv() : sinks.hv();
        a.out = d ? out.dv() : out.hv();
        a.pos0 = c.pos0, a.n_cached = c.n_cached, a.window = c.window, a.comp_mask = c.mask, a.rate = c.rate;
        a.scale = 1.0f / std::sqrt(float(c.hd));
        return a;
    };
    b.ref->attention(make(false));
    const std::vector<float> want = out.host_f32();
    for (const char* variant : {"split_kv", "per_query"}) {  // every variant against the same reference
        if (c.hd % 4 != 0 && std::string(variant) == "split_kv") continue;  // split_kv loads float4s
        out.poison();  // the device copy NaN, so a variant that skips an element cannot pass
        std::memcpy(out.hv().data, want.data(), want.size() * sizeof(float));
        ASSERT_TRUE(b.gpu->force_variant("attention", variant));
        const int64_t before = b.gpu->dispatch_count("attention", variant);
        b.gpu->attention(make(true));
        EXPECT_EQ(b.gpu->dispatch_count("attention", variant), before + 1) << variant;
        expect_close(out, 1e-5, std::string(c.name) + " " + variant);
    }
    ASSERT_TRUE(b.gpu->force_variant("attention", ""));
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAttention, ::testing::ValuesIn(kAttn),
                         [](const auto& tp) { return std::string(tp.param.name); });

struct CompressCase {
    const char* name;
    int64_t L, d, rate, pos0;
    bool overlap;
};

const CompressCase kCompress[] = {
    {"hca_flash_prefill", 300, 512, 128, 100, false},
    {"hca_decode_closing", 1, 512, 128, 127, false},
    {"csa_flash_decode_closing", 1, 512, 4, 7, true},   // first window of the call: overlap from state
    {"csa_flash_decode_open", 1, 512, 4, 9, true},
    {"csa_prefill_from_zero", 37, 512, 4, 0, true},     // w = 0: empty overlap half
    {"indexer_prefill_mid", 23, 128, 4, 5, true},
    {"odd_small", 7, 5, 3, 2, true},
};

class CudaCompress : public ::testing::TestWithParam<CompressCase> {};

// per-channel softmax over <= 256 slots in double on both sides: 1e-6; state copies exact
TEST_P(CudaCompress, MatchesRefIncludingState) {
    SKIP_WITHOUT_GPU();
    const CompressCase& c = GetParam();
    auto& b = backends();
    const int64_t width = c.overlap ? 2 * c.d : c.d, n_new = ops::CompressArgs::n_new(c.pos0, c.L, c.rate);
    Pair kv(DType::kF32, {c.L, width}), gate(DType::kF32, {c.L, width}), bias(DType::kF32, {c.rate, width});
    Pair bkv(DType::kF32, {c.rate, width}), bgate(DType::kF32, {c.rate, width});
    Pair okv(DType::kF32, {c.rate, c.d}), ogate(DType::kF32, {c.rate, c.d});
    Pair out(DType::kF32, {std::max<int64_t>(n_new, 1), c.d});
    fill_uniform(kv), fill_uniform(gate, -3, 3), fill_uniform(bias), fill_uniform(bkv), fill_uniform(bgate, -3, 3);
    fill_uniform(okv), fill_uniform(ogate, -3, 3);
    out.poison();
    auto make = [&](bool d) {
        ops::CompressArgs a;
        a.kv = d ? kv.dv() : kv.hv(), a.gate = d ? gate.dv() : gate.hv(), a.bias = d ? bias.dv() : bias.hv();
        a.buf_kv = d ? bkv.dv() : bkv.hv(), a.buf_gate = d ? bgate.dv() : bgate.hv();
        if (c.overlap) a.ovl_kv = d ? okv.dv() : okv.hv(), a.ovl_gate = d ? ogate.dv() : ogate.hv();
        a.out = (d ? out.dv() : out.hv()).rows(0, n_new);
        a.pos0 = c.pos0, a.rate = c.rate, a.overlap = c.overlap;
        return a;
    };
    b.ref->compress(make(false));
    b.gpu->compress(make(true));
    if (n_new > 0) expect_close(out, 1e-6, std::string(c.name) + " entries");
    expect_close(bkv, 0.0, std::string(c.name) + " buf_kv");
    expect_close(bgate, 0.0, std::string(c.name) + " buf_gate");
    if (c.overlap) {
        expect_close(okv, 0.0, std::string(c.name) + " ovl_kv");
        expect_close(ogate, 0.0, std::string(c.name) + " ovl_gate");
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaCompress, ::testing::ValuesIn(kCompress),
                         [](const auto& tp) { return std::string(tp.param.name); });

struct IndexerCase {
    const char* name;
    int64_t L, H, dim, T, k, pos0, rate;
    bool many_zero_scores;  // most entries score exactly 0: the tie rule decides the picks
};

const IndexerCase kIndexer[] = {
    {"flash_decode_top512", 1, 64, 128, 3000, 512, 12003, 4, false},
    {"flash_prefill_causal_cut", 6, 64, 128, 700, 512, 2790, 4, false},
    {"ties_at_zero", 5, 8, 64, 300, 40, 1200, 4, true},
    {"k_equals_T_with_fillers", 9, 4, 32, 10, 10, 20, 4, false},  // early queries: -1 fillers
    {"odd_dims", 3, 3, 20, 37, 7, 150, 4, false},
};

class CudaIndexer : public ::testing::TestWithParam<IndexerCase> {};

// Picks must equal ref's exactly; the only allowed difference is between entries whose (double) scores
// are within 1e-5 relative of each other (f32 vs double accumulation can order such near-ties differently).
TEST_P(CudaIndexer, PicksMatchRef) {
    SKIP_WITHOUT_GPU();
    const IndexerCase& c = GetParam();
    auto& b = backends();
    Pair q(DType::kF32, {c.L, c.H, c.dim}), w(DType::kF32, {c.L, c.H}), keys(DType::kF32, {c.T, c.dim});
    Pair picks(DType::kI32, {c.L, c.k});
    fill_uniform(q), fill_uniform(w), fill_uniform(keys);
    if (c.many_zero_scores) {  // keys of entries w % 4 != 0 point away from every query: ReLU gives 0
        for (int64_t i = 0; i < q.hv().numel(); ++i) q.hv().ptr<float>()[i] = std::abs(q.hv().ptr<float>()[i]);
        for (int64_t e = 0; e < c.T; ++e)
            for (int64_t j = 0; j < c.dim; ++j) {
                float& v = keys.hv().ptr<float>()[e * c.dim + j];
                v = e % 4 ? -std::abs(v) : std::abs(v);
            }
        q.upload(), keys.upload();
    }
    picks.poison();
    const float ws = 1.0f / std::sqrt(float(c.H)), ss = 1.0f / std::sqrt(float(c.dim));
    b.ref->indexer_topk({q.hv(), w.hv(), keys.hv(), picks.hv(), c.pos0, c.rate, ws, ss});
    b.gpu->indexer_topk({q.dv(), w.dv(), keys.dv(), picks.dv(), c.pos0, c.rate, ws, ss});
    const auto got = picks.device_as<int32_t>();
    const int32_t* want = picks.hv().ptr<int32_t>();
    auto score = [&](int64_t t, int64_t e) {
        double s = 0;
        for (int64_t h = 0; h < c.H; ++h) {
            double dot = 0;
            for (int64_t j = 0; j < c.dim; ++j)
                dot += double(q.hv().ptr<float>()[(t * c.H + h) * c.dim + j]) * keys.hv().ptr<float>()[e * c.dim + j];
            s += std::max(dot, 0.0) * ss * w.hv().ptr<float>()[t * c.H + h] * ws;
        }
        return s;
    };
    int64_t mismatches = 0, near_ties = 0;
    for (int64_t i = 0; i < c.L * c.k; ++i) {
        if (got[size_t(i)] == want[i]) continue;
        ++mismatches;
        const int64_t t = i / c.k;
        if (got[size_t(i)] >= 0 && want[i] >= 0) {
            const double a = score(t, got[size_t(i)]), r = score(t, want[i]);
            if (std::abs(a - r) <= 1e-5 * std::max(std::abs(a), std::abs(r))) ++near_ties;
        }
    }
    EXPECT_EQ(mismatches, near_ties) << c.name << ": " << mismatches << " picks differ, " << near_ties
                                     << " of them near-ties";
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaIndexer, ::testing::ValuesIn(kIndexer),
                         [](const auto& tp) { return std::string(tp.param.name); });

}  // namespace
}  // namespace di::gputest
