// attention, compress and indexer_topk on CUDA vs ref, on V4-Flash shapes (64 heads x 512, window 128,
// CSA rate 4 / HCA rate 128, index 64 x 128, top-512) and small awkward ones.
#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "gpu_test_util.h"
#include "ops/cuda/attention_decode.h"
#include "ops/cuda/kernels.h"
#include "ops/op_cases.h"

namespace di::gputest {
namespace {

#define SKIP_WITHOUT_GPU() \
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

using AttnCase = ops::cases::AttentionCase;
// The CUDA cases of the attention table (ops/op_cases.h).
const std::vector<AttnCase> kAttn = ops::cases::attention_cases(ops::cases::kCudaTest);

class CudaAttention : public ::testing::TestWithParam<AttnCase> {};

// A job of the batched attention tests: L queries from pos0 over T compressed entries at `rate`, k picks a
// query where mask is kPicks.
struct AttnJob {
    int64_t L, pos0, T, rate, k;
    ops::CompMask mask;
};

TensorView side(const Pair& p, bool device) { return device ? p.dv() : p.hv(); }

// Each job's first row when the jobs' queries lie one after another; `rows` their total.
template <size_t N>
std::vector<int64_t> row_starts(const AttnJob (&spec)[N], int64_t& rows) {
    std::vector<int64_t> row0;
    rows = 0;
    for (const AttnJob& j : spec) row0.push_back(rows), rows += j.L;
    return row0;
}

// The job's entries [max(T, 1), hd] (uniform) and picks [L, max(k, 1)] (-1s and repeats, as the op allows),
// uploaded.
void fill_entries(const AttnJob& j, int64_t hd, Pair& comp, Pair& picks) {
    comp = Pair(DType::kF32, {std::max<int64_t>(j.T, 1), hd});
    picks = Pair(DType::kI32, {j.L, std::max<int64_t>(j.k, 1)});
    fill_uniform(comp);
    for (int64_t e = 0; e < picks.hv().numel(); ++e)
        picks.hv().ptr<int32_t>()[e] = int32_t(int64_t(rng()() % uint32_t(j.T + 1)) - 1);
    picks.upload();
}

// The job's call (its device views where `device`): q, kv and out its rows, the rest its own.
ops::AttentionArgs job_args(const AttnJob& j, bool device, const TensorView& q, const TensorView& kv,
                            const TensorView& out, const Pair& ring, const Pair& comp, const Pair& picks,
                            const Pair& sinks, int64_t window, bool f16) {
    ops::AttentionArgs a;
    a.q = q, a.kv = kv, a.out = out, a.ring = side(ring, device), a.sinks = side(sinks, device);
    if (j.mask != ops::CompMask::kNone) a.comp = side(comp, device);
    if (j.mask == ops::CompMask::kPicks) a.picks = side(picks, device);
    a.pos0 = j.pos0, a.n_cached = std::min(j.pos0, window - 1), a.window = window, a.comp_mask = j.mask;
    a.rate = j.rate, a.scale = 1.0f / std::sqrt(float(q.shape[2])), a.f16 = f16;
    return a;
}

// Tolerance: the table's kAttentionCuda (f32 online softmax vs double two-pass, hd 512 dot products in f32)
TEST_P(CudaAttention, MatchesRef) {
    SKIP_WITHOUT_GPU();
    const AttnCase& c = GetParam();
    auto& b = backends();
    Pair q(DType::kF32, {c.L, c.H, c.hd}), ring(DType::kF32, {c.window - 1, c.hd}),
        kv(DType::kF32, {c.L, c.hd});
    Pair comp(DType::kF32, {std::max<int64_t>(c.T, 1), c.hd}),
        picks(DType::kI32, {c.L, std::max<int64_t>(c.n_picks, 1)});
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
    for (const char* variant :
         {"mma", "split_kv", "per_query"}) {  // every variant against the same reference
        if (c.hd % 4 != 0 && std::string(variant) == "split_kv") continue;  // split_kv loads float4s
        if ((c.hd != 512 || c.H % 16 != 0) && std::string(variant) == "mma") continue;  // its one shape
        out.poison();  // the device copy NaN, so a variant that skips an element cannot pass
        std::memcpy(out.hv().data, want.data(), want.size() * sizeof(float));
        ASSERT_TRUE(b.gpu->force_variant("attention", variant));
        const int64_t before = b.gpu->dispatch_count("attention", variant);
        b.gpu->attention(make(true));
        EXPECT_EQ(b.gpu->dispatch_count("attention", variant), before + 1) << variant;
        expect_close(out, ops::cases::kAttentionCuda.value, std::string(c.name) + " " + variant);
    }
    // the native precision's f16 operands; mma64 also on the warpgroup tensor cores (set_attention_wgmma)
    for (const std::string run : {"mma64", "mma64 wgmma", "mma64 wgmma2", "mma"}) {
        const int wgmma = run == "mma64 wgmma" ? 1 : run == "mma64 wgmma2" ? 2 : 0;
        const char* variant = run == "mma" ? "mma" : "mma64";
        if (c.hd != 512 || c.H % (run == "mma" ? 16 : 64) != 0) continue;
        out.poison();
        ASSERT_TRUE(b.gpu->force_variant("attention", variant));
        ops::AttentionArgs a = make(true);
        a.f16 = true;
        const int64_t before = b.gpu->dispatch_count("attention", variant);
        const int was = cuda::set_attention_wgmma(wgmma);
        b.gpu->attention(a);
        cuda::set_attention_wgmma(was);
        EXPECT_EQ(b.gpu->dispatch_count("attention", variant), before + 1) << run;
        std::memcpy(out.hv().data, want.data(), want.size() * sizeof(float));
        expect_close(out, ops::cases::kAttentionNativeCuda.value, std::string(c.name) + " " + run + " f16");
    }
    ASSERT_TRUE(b.gpu->force_variant("attention", ""));
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAttention, ::testing::ValuesIn(kAttn),
                         [](const auto& tp) { return std::string(tp.param.name); });

// attentions(): several sequences' decode queries in one batched launch pair (and a prefill chunk among them,
// which runs alone): each output bit-identical to attention() on its own and within 1e-5 of the reference;
// window_stores(): every ring as window_store() on its own (exact copies).
TEST(CudaAttentions, BatchedEqualsEachAlone) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    const int64_t H = 64, hd = 512, window = 128;
    using Job = AttnJob;
    const Job spec[] = {
        {1, 10, 0, 1, 0, ops::CompMask::kNone},          {1, 1000, 7, 128, 0, ops::CompMask::kCausal},
        {1, 4000, 1000, 4, 512, ops::CompMask::kPicks},  {3, 500, 4, 128, 0, ops::CompMask::kCausal},
        {1, 70000, 546, 128, 0, ops::CompMask::kCausal}, {1, 127, 31, 4, 512, ops::CompMask::kPicks}};
    const size_t n = std::size(spec);
    std::vector<Pair> q(n), ring(n), kv(n), comp(n), picks(n), out(n);
    Pair sinks(DType::kF32, {H});
    fill_uniform(sinks, -2, 2);
    for (size_t i = 0; i < n; ++i) {
        const Job& j = spec[i];
        q[i] = Pair(DType::kF32, {j.L, H, hd}), ring[i] = Pair(DType::kF32, {window - 1, hd});
        kv[i] = Pair(DType::kF32, {j.L, hd}), out[i] = Pair(DType::kF32, {j.L, H, hd});
        fill_uniform(q[i]), fill_uniform(ring[i]), fill_uniform(kv[i]);
        fill_entries(j, hd, comp[i], picks[i]);
    }
    auto args = [&](size_t i, bool d) {
        return job_args(spec[i], d, side(q[i], d), side(kv[i], d), side(out[i], d), ring[i], comp[i],
                        picks[i], sinks, window, false);
    };
    std::vector<std::vector<float>> alone(n);
    for (size_t i = 0; i < n; ++i) {
        out[i].poison();
        b.ref->attention(args(i, false));
        b.gpu->attention(args(i, true));
        alone[i] = out[i].device_f32();
    }
    std::vector<ops::AttentionArgs> all;
    for (size_t i = 0; i < n; ++i) {
        const std::vector<float> want = out[i].host_f32();
        out[i].poison();  // both copies NaN: the batch must write every element
        std::memcpy(out[i].hv().data, want.data(), want.size() * sizeof(float));
        all.push_back(args(i, true));
    }
    const int64_t split_before = b.gpu->dispatch_count("attention", "split_kv");
    b.gpu->attentions(all);
    EXPECT_EQ(b.gpu->dispatch_count("attention", "split_kv") - split_before, int64_t(n));
    for (size_t i = 0; i < n; ++i) {
        expect_close(out[i], 1e-5, "job " + std::to_string(i));
        const std::vector<float> got = out[i].device_f32();
        EXPECT_EQ(0, std::memcmp(got.data(), alone[i].data(), got.size() * sizeof(float))) << "job " << i;
    }

    // window_stores: the same rings and kv rows, one call; the 3-row chunk and a 200-row one (wraps the ring)
    Pair long_kv(DType::kF32, {200, hd}), long_ring(DType::kF32, {window - 1, hd});
    fill_uniform(long_kv), fill_uniform(long_ring);
    std::vector<ops::WindowStoreArgs> ref_stores, gpu_stores;
    for (size_t i = 0; i < n; ++i) {
        ref_stores.push_back({kv[i].hv(), ring[i].hv(), spec[i].pos0});
        gpu_stores.push_back({kv[i].dv(), ring[i].dv(), spec[i].pos0});
    }
    ref_stores.push_back({long_kv.hv(), long_ring.hv(), 300});
    gpu_stores.push_back({long_kv.dv(), long_ring.dv(), 300});
    for (const auto& a : ref_stores) b.ref->window_store(a);
    b.gpu->window_stores(gpu_stores);
    for (size_t i = 0; i < n; ++i) expect_close(ring[i], 0.0, "ring " + std::to_string(i));
    expect_close(long_ring, 0.0, "long ring");
}

// attentions_stored(): an attention layer's tail (the decode jobs' window stores and the output's inverse
// rotation in the merge kernel, a 3-row prefill chunk through the separate parts) gives the three calls' bits
// in every output row and ring, and the reference's values (rings exact).
TEST(CudaAttentions, StoredTailEqualsTheParts) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    const int64_t H = 64, hd = 512, window = 128, half = 32;
    using Job = AttnJob;
    const Job spec[] = {{1, 10, 0, 1, 0, ops::CompMask::kNone},
                        {1, 1000, 7, 128, 0, ops::CompMask::kCausal},
                        {3, 500, 4, 128, 0, ops::CompMask::kCausal},
                        {1, 4000, 1000, 4, 512, ops::CompMask::kPicks},
                        {1, 200, 0, 1, 0, ops::CompMask::kNone}};
    const size_t n = std::size(spec);
    int64_t rows = 0;
    const std::vector<int64_t> row0 = row_starts(spec, rows);
    Pair q(DType::kF32, {rows, H, hd}), kv(DType::kF32, {rows, hd}), sinks(DType::kF32, {H});
    Pair pos(DType::kI32, {rows}), inv(DType::kF32, {half});
    Pair o_parts(DType::kF32, {rows, H, hd}), o_fused(DType::kF32, {rows, H, hd});
    fill_uniform(q), fill_uniform(kv), fill_uniform(sinks, -2, 2), fill_uniform(inv, 0.0f, 1.0f);
    std::vector<Pair> ring(n), ring_fused(n), comp(n), picks(n);
    for (size_t i = 0; i < n; ++i) {
        const Job& j = spec[i];
        for (int64_t t = 0; t < j.L; ++t) pos.hv().ptr<int32_t>()[row0[i] + t] = int32_t(j.pos0 + t);
        ring[i] = Pair(DType::kF32, {window - 1, hd}), ring_fused[i] = Pair(DType::kF32, {window - 1, hd});
        fill_uniform(ring[i]);
        std::memcpy(ring_fused[i].hv().data, ring[i].hv().data, ring[i].hv().nbytes());
        ring_fused[i].upload();
        fill_entries(j, hd, comp[i], picks[i]);
    }
    pos.upload();
    // where: 0 the reference (host), 1 the parts, 2 the fused tail
    auto calls = [&](int where) {
        const bool d = where > 0;
        const Pair& o = where == 2 ? o_fused : o_parts;
        std::vector<ops::AttentionArgs> jobs;
        std::vector<ops::WindowStoreArgs> stores;
        for (size_t i = 0; i < n; ++i) {
            const Job& j = spec[i];
            const ops::AttentionArgs a =
                job_args(j, d, side(q, d).rows(row0[i], j.L), side(kv, d).rows(row0[i], j.L),
                         side(o, d).rows(row0[i], j.L), where == 2 ? ring_fused[i] : ring[i], comp[i],
                         picks[i], sinks, window, false);
            jobs.push_back(a);
            stores.push_back({a.kv, a.ring, j.pos0});
        }
        ops::RopeArgs ro{.x = d ? o.dv() : o.hv(),
                         .positions = d ? pos.dv() : pos.hv(),
                         .inv_freq = d ? inv.dv() : inv.hv(),
                         .mscale = 1.25f,
                         .inverse = true};
        if (where == 0) return b.ref->attentions_stored(jobs, stores, ro, nullptr, nullptr);
        if (where == 2) return b.gpu->attentions_stored(jobs, stores, ro, nullptr, nullptr);
        b.gpu->attentions(jobs);
        b.gpu->window_stores(stores);
        b.gpu->rope(ro);
    };
    o_parts.poison(), o_fused.poison();
    calls(1);
    const int64_t ropes = b.gpu->dispatch_count("rope", "cuda");
    calls(2);
    // the fused path: the decode jobs' rotation counted with their merge, the 3-row chunk's rope on its own
    EXPECT_EQ(b.gpu->dispatch_count("rope", "cuda") - ropes, 2);
    calls(0);  // the host copies of o_parts and ring now hold the reference
    const std::vector<float> parts = o_parts.device_f32(), fused = o_fused.device_f32();
    EXPECT_EQ(0, std::memcmp(parts.data(), fused.data(), parts.size() * sizeof(float)))
        << "the fused tail's output differs from the parts'";
    for (size_t i = 0; i < n; ++i) {
        const std::vector<float> a = ring[i].device_f32(), f = ring_fused[i].device_f32();
        EXPECT_EQ(0, std::memcmp(a.data(), f.data(), a.size() * sizeof(float))) << "ring " << i;
        expect_close(ring[i], 0.0, "ring " + std::to_string(i) + " against ref");
    }
    expect_close(o_parts, 1e-5, "output against ref");
}

// attentions_stored(), native precision, 40 decode jobs (sliding, HCA, CSA with 512 picks of 1,000 entries)
// and a CSA job at a long context (3,250 entries): from attention_decode_wgp_min() decode jobs a call runs
// them on attention_wgp in three launches (the picked entries listed, the key rows converted, a block a job;
// the output rotated where it is stored, the rings stored after), a job with picks converting only the
// entries it reads. The batch's output equals the same jobs forced onto mma64 one at a time (which convert
// every entry) and then rotated bit for bit, and the reference within the native tolerance; below the
// threshold split_kv runs them (within the native tolerance too); the rings exact.
TEST(CudaAttentions, DecodeBatchOnWarpgroups) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    const int64_t H = 64, hd = 512, window = 128, half = 32, n = 41, batch = 40;  // and the long one
    using Job = AttnJob;
    const Job kinds[] = {{1, 10, 0, 1, 0, ops::CompMask::kNone},
                         {1, 1000, 7, 128, 0, ops::CompMask::kCausal},
                         {1, 4000, 1000, 4, 512, ops::CompMask::kPicks},
                         {1, 300, 0, 1, 0, ops::CompMask::kNone}};
    std::vector<Job> spec;
    for (int64_t i = 0; i < batch; ++i) {
        Job j = kinds[i % 4];
        j.pos0 += i;
        spec.push_back(j);
    }
    // a CSA query at a 13,000-token context: the batch converts only its picks of the 3,250 entries
    spec.push_back({1, 13000, 3250, 4, 512, ops::CompMask::kPicks});
    Pair q(DType::kF32, {n, H, hd}), kv(DType::kF32, {n, hd}), sinks(DType::kF32, {H});
    Pair pos(DType::kI32, {n}), inv(DType::kF32, {half});
    Pair o_split(DType::kF32, {n, H, hd}), o_wgp(DType::kF32, {n, H, hd}), o_alone(DType::kF32, {n, H, hd});
    fill_uniform(q, -3.0f, 3.0f), fill_uniform(kv), fill_uniform(sinks, -2, 2), fill_uniform(inv, 0.0f, 1.0f);
    std::vector<Pair> ring(n), ring_wgp(n), ring_alone(n), comp(n), picks(n);
    for (int64_t i = 0; i < n; ++i) {
        const Job& j = spec[size_t(i)];
        pos.hv().ptr<int32_t>()[i] = int32_t(j.pos0);
        ring[i] = Pair(DType::kF32, {window - 1, hd}), ring_wgp[i] = Pair(DType::kF32, {window - 1, hd});
        ring_alone[i] = Pair(DType::kF32, {window - 1, hd});
        fill_uniform(ring[i]);
        for (Pair* c : {&ring_wgp[i], &ring_alone[i]})
            std::memcpy(c->hv().data, ring[i].hv().data, ring[i].hv().nbytes()), c->upload();
        fill_entries(j, hd, comp[i], picks[i]);
    }
    pos.upload();
    // where: 0 the reference (host), 1 split_kv (the threshold out of reach), 2 the decode batch on
    // attention_wgp (threshold 1), 3 each job forced onto mma64 alone, then the stores and the rotation
    auto calls = [&](int where) {
        const bool d = where > 0;
        const Pair& o = where == 2 ? o_wgp : where == 3 ? o_alone : o_split;
        std::vector<ops::AttentionArgs> jobs;
        std::vector<ops::WindowStoreArgs> stores;
        for (int64_t i = 0; i < n; ++i) {
            const Job& j = spec[size_t(i)];
            const ops::AttentionArgs a =
                job_args(j, d, side(q, d).rows(i, 1), side(kv, d).rows(i, 1), side(o, d).rows(i, 1),
                         where == 2   ? ring_wgp[i]
                         : where == 3 ? ring_alone[i]
                                      : ring[i],
                         comp[i], picks[i], sinks, window, true);
            jobs.push_back(a);
            stores.push_back({a.kv, a.ring, j.pos0});
        }
        const ops::RopeArgs ro{.x = d ? o.dv() : o.hv(),
                               .positions = d ? pos.dv() : pos.hv(),
                               .inv_freq = d ? inv.dv() : inv.hv(),
                               .mscale = 1.25f,
                               .inverse = true};
        if (where == 0) return b.ref->attentions_stored(jobs, stores, ro, nullptr, nullptr);
        if (where == 3) {
            ASSERT_TRUE(b.gpu->force_variant("attention", "mma64"));
            b.gpu->attentions(jobs);
            ASSERT_TRUE(b.gpu->force_variant("attention", ""));
            b.gpu->window_stores(stores);
            return b.gpu->rope(ro);
        }
        const int64_t was = cuda::set_attention_decode_wgp_min(where == 2 ? 1 : int64_t(1) << 40);
        b.gpu->attentions_stored(jobs, stores, ro, nullptr, nullptr);
        cuda::set_attention_decode_wgp_min(was);
    };
    o_split.poison(), o_wgp.poison(), o_alone.poison();
    const int64_t launches = cuda::attention_decode_wgp_launches();
    calls(1);
    EXPECT_EQ(cuda::attention_decode_wgp_launches(), launches) << "split_kv's call went to the batch";
    const int64_t mma64 = b.gpu->dispatch_count("attention", "mma64"),
                  split = b.gpu->dispatch_count("attention", "split_kv");
    calls(2);
    EXPECT_EQ(cuda::attention_decode_wgp_launches(), launches + 1) << "the decode batch did not run";
    EXPECT_EQ(b.gpu->dispatch_count("attention", "mma64"), mma64 + n);
    EXPECT_EQ(b.gpu->dispatch_count("attention", "split_kv"), split);
    calls(3);
    {
        const std::vector<float> w = o_wgp.device_f32(), a = o_alone.device_f32();
        EXPECT_EQ(0, std::memcmp(w.data(), a.data(), w.size() * sizeof(float)))
            << "the batch's output differs from each job's own launch";
    }
    calls(0);  // the host copies of o_split and ring now hold the reference
    for (Pair* o : {&o_wgp, &o_alone}) std::memcpy(o->hv().data, o_split.hv().data, o_split.hv().nbytes());
    const Diff dw = diff(o_split.host_f32(), o_wgp.device_f32()),
               ds = diff(o_split.host_f32(), o_split.device_f32());
    std::printf(
        "decode batch of %lld against ref: attention_wgp rel L2 %.3g max abs %.3g; split_kv %.3g %.3g\n",
        static_cast<long long>(n), dw.rel_l2, dw.max_abs, ds.rel_l2, ds.max_abs);
    expect_close(o_wgp, ops::cases::kAttentionNativeCuda.value, "attention_wgp's decode batch against ref");
    expect_close(o_split, ops::cases::kAttentionNativeCuda.value, "split_kv against ref");
    for (int64_t i = 0; i < n; ++i) {
        const std::vector<float> a = ring[i].device_f32(), w = ring_wgp[i].device_f32();
        EXPECT_EQ(0, std::memcmp(a.data(), w.data(), a.size() * sizeof(float))) << "ring " << i;
        expect_close(ring[i], 0.0, "ring " + std::to_string(i) + " against ref");
    }
}

// attentions_stored() with a QueryPrep, native precision: the prefill chunks on attention_wgp norm and rotate
// their queries where they load them and rotate their output where they store it; a decode job and a 3-row
// chunk get q prepared by their own launch. Against the same call on q prepared beforehand (the parts): the
// same f16 queries but for the norm's sum order (a 1-ulp difference in a row's scale can move an f16 value by
// one unit), so within 1e-4; against the reference's default (prepare, attend, store, rotate) at the native
// tolerance; the rings exact. With an out_quant too, the output's codes and scales (written where
// attention_wgp stores it, by act_quant for the other two jobs) are act_quant's of the parts' output, bit for
// bit where the fused output is (measured: it is).
TEST(CudaAttentions, StoredTailPreparesQueries) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    const int64_t H = 64, hd = 512, window = 128, half = 32;
    const float eps = 1e-6f, mscale = 1.25f;
    using Job = AttnJob;
    const Job spec[] = {
        {40, 0, 0, 1, 0, ops::CompMask::kNone},       {24, 300, 2, 128, 0, ops::CompMask::kCausal},
        {20, 900, 225, 4, 64, ops::CompMask::kPicks}, {1, 1000, 7, 128, 0, ops::CompMask::kCausal},
        {3, 500, 4, 128, 0, ops::CompMask::kCausal},  {16, 129, 0, 1, 0, ops::CompMask::kNone}};
    const size_t n = std::size(spec);
    int64_t rows = 0;
    const std::vector<int64_t> row0 = row_starts(spec, rows);
    Pair q(DType::kF32, {rows, H, hd}), q_parts(DType::kF32, {rows, H, hd}),
        q_fused(DType::kF32, {rows, H, hd}), q_quant(DType::kF32, {rows, H, hd});
    // the quantised output: the fused tail's, and act_quant's of the parts' output (block-major scales)
    Pair o_q(DType::kF32, {rows, H, hd}), oq(DType::kF8E4M3, {rows, H * hd}),
        osc(DType::kF32, {H * hd / 128, rows});
    Pair pq(DType::kF8E4M3, {rows, H * hd}), psc(DType::kF32, {H * hd / 128, rows});
    auto block_major = [](TensorView v) {
        std::swap(v.shape[0], v.shape[1]), std::swap(v.stride[0], v.stride[1]);
        return v;
    };
    Pair kv(DType::kF32, {rows, hd}), sinks(DType::kF32, {H}), pos(DType::kI32, {rows}),
        inv(DType::kF32, {half});
    Pair o_parts(DType::kF32, {rows, H, hd}), o_fused(DType::kF32, {rows, H, hd});
    fill_uniform(q, -3.0f, 3.0f), fill_uniform(kv), fill_uniform(sinks, -2, 2), fill_uniform(inv, 0.0f, 1.0f);
    for (Pair* c : {&q_parts, &q_fused, &q_quant})
        std::memcpy(c->hv().data, q.hv().data, q.hv().nbytes()), c->upload();
    std::vector<Pair> ring(n), ring_fused(n), ring_quant(n), comp(n), picks(n);
    for (size_t i = 0; i < n; ++i) {
        const Job& j = spec[i];
        for (int64_t t = 0; t < j.L; ++t) pos.hv().ptr<int32_t>()[row0[i] + t] = int32_t(j.pos0 + t);
        ring[i] = Pair(DType::kF32, {window - 1, hd}), ring_fused[i] = Pair(DType::kF32, {window - 1, hd});
        ring_quant[i] = Pair(DType::kF32, {window - 1, hd});
        fill_uniform(ring[i]);
        for (Pair* c : {&ring_fused[i], &ring_quant[i]})
            std::memcpy(c->hv().data, ring[i].hv().data, ring[i].hv().nbytes()), c->upload();
        fill_entries(j, hd, comp[i], picks[i]);
    }
    pos.upload();
    // where: 0 the reference (host), 1 the parts (q prepared beforehand), 2 the fused tail, 3 the fused tail
    // with the output quantised
    auto calls = [&](int where) {
        const bool d = where > 0;
        const Pair& o = where == 2 ? o_fused : where == 3 ? o_q : o_parts;
        const Pair& qq = where == 0 ? q : where == 1 ? q_parts : where == 2 ? q_fused : q_quant;
        std::vector<ops::AttentionArgs> jobs;
        std::vector<ops::WindowStoreArgs> stores;
        for (size_t i = 0; i < n; ++i) {
            const Job& j = spec[i];
            const ops::AttentionArgs a =
                job_args(j, d, side(qq, d).rows(row0[i], j.L), side(kv, d).rows(row0[i], j.L),
                         side(o, d).rows(row0[i], j.L),
                         where == 2   ? ring_fused[i]
                         : where == 3 ? ring_quant[i]
                                      : ring[i],
                         comp[i], picks[i], sinks, window, true);
            jobs.push_back(a);
            stores.push_back({a.kv, a.ring, j.pos0});
        }
        const TensorView pv = d ? pos.dv() : pos.hv(), iv = d ? inv.dv() : inv.hv();
        const ops::RopeArgs ro{
            .x = d ? o.dv() : o.hv(), .positions = pv, .inv_freq = iv, .mscale = mscale, .inverse = true};
        const ops::QueryPrep prep{
            .rope = {.x = d ? qq.dv() : qq.hv(), .positions = pv, .inv_freq = iv, .mscale = mscale},
            .eps = eps};
        if (where == 0) return b.ref->attentions_stored(jobs, stores, ro, &prep, nullptr);
        if (where == 2) return b.gpu->attentions_stored(jobs, stores, ro, &prep, nullptr);
        const ops::ActQuantArgs quant{
            .x = o_q.dv().reshape({rows, H * hd}), .q = oq.dv(), .scales = block_major(osc.dv())};
        if (where == 3) return b.gpu->attentions_stored(jobs, stores, ro, &prep, &quant);
        b.gpu->prepare_queries(prep);
        b.gpu->attentions_stored(jobs, stores, ro, nullptr, nullptr);
    };
    o_parts.poison(), o_fused.poison();
    calls(1);
    const int64_t norms = b.gpu->dispatch_count("rms_norm", "cuda");
    calls(2);
    // in the kernel's load for the four chunks on attention_wgp, one launch for the other two jobs
    EXPECT_EQ(b.gpu->dispatch_count("rms_norm", "cuda") - norms, 5);
    oq.poison(), osc.poison(), pq.poison(), psc.poison();
    const int64_t quants = b.gpu->dispatch_count("act_quant", "cuda");
    calls(3);
    // where the four chunks store their output, one launch for each of the other two jobs
    EXPECT_EQ(b.gpu->dispatch_count("act_quant", "cuda") - quants, 6);
    b.gpu->act_quant(
        {.x = o_parts.dv().reshape({rows, H * hd}), .q = pq.dv(), .scales = block_major(psc.dv())});
    {
        const std::vector<uint8_t> fused_codes = oq.device_as<uint8_t>(),
                                   parts_codes = pq.device_as<uint8_t>();
        const std::vector<float> fused_scales = osc.device_f32(), parts_scales = psc.device_f32();
        EXPECT_EQ(0, std::memcmp(fused_codes.data(), parts_codes.data(), fused_codes.size())) << "codes";
        EXPECT_EQ(0,
                  std::memcmp(fused_scales.data(), parts_scales.data(), fused_scales.size() * sizeof(float)))
            << "scales";
    }
    calls(0);  // the host copies of o_parts and ring now hold the reference
    const std::vector<float> parts = o_parts.device_f32(), fused = o_fused.device_f32();
    const Diff df = diff(parts, fused);
    std::printf("attentions_stored q_prep: fused vs parts rel L2 %.3g max abs %.3g\n", df.rel_l2, df.max_abs);
    EXPECT_EQ(df.nan, 0);
    EXPECT_LE(df.rel_l2, 1e-4) << "the fused queries differ from the prepared ones'";
    for (size_t i = 0; i < n; ++i) {
        const std::vector<float> a = ring[i].device_f32(), f = ring_fused[i].device_f32();
        EXPECT_EQ(0, std::memcmp(a.data(), f.data(), a.size() * sizeof(float))) << "ring " << i;
    }
    expect_close(o_parts, ops::cases::kAttentionNativeCuda.value, "parts against ref");
    std::memcpy(o_fused.hv().data, o_parts.hv().data, o_parts.hv().nbytes());  // the reference
    expect_close(o_fused, ops::cases::kAttentionNativeCuda.value, "fused against ref");
}

// attentions_stored() with the queries as wq_b stores them in bf16 (QueryPrep::src): attention_wgp reads them
// where it prepares q, the decode job and the 3-row chunk get them cast into q first. Against the same call
// on f32 q holding the same values (exact: bf16 widens to f32 exactly): the same bits, output and rings.
TEST(CudaAttentions, StoredTailReadsBf16Queries) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    const int64_t H = 64, hd = 512, window = 128, half = 32;
    const AttnJob spec[] = {{40, 0, 0, 1, 0, ops::CompMask::kNone},
                            {24, 300, 2, 128, 0, ops::CompMask::kCausal},
                            {20, 900, 225, 4, 64, ops::CompMask::kPicks},
                            {1, 1000, 7, 128, 0, ops::CompMask::kCausal},
                            {3, 500, 4, 128, 0, ops::CompMask::kCausal}};
    const size_t n = std::size(spec);
    int64_t rows = 0;
    const std::vector<int64_t> row0 = row_starts(spec, rows);
    Pair q16(DType::kBF16, {rows, H, hd}), q_wide(DType::kF32, {rows, H, hd}),
        q_scratch(DType::kF32, {rows, H, hd});
    Pair kv(DType::kF32, {rows, hd}), sinks(DType::kF32, {H}), pos(DType::kI32, {rows}),
        inv(DType::kF32, {half});
    Pair o_wide(DType::kF32, {rows, H, hd}), o_src(DType::kF32, {rows, H, hd});
    fill_uniform(q_wide, -3.0f, 3.0f), fill_uniform(kv), fill_uniform(sinks, -2, 2),
        fill_uniform(inv, 0.0f, 1.0f);
    for (int64_t i = 0; i < q16.hv().numel(); ++i) {  // q_wide: the bf16 values, exactly
        const uint16_t h = f32_to_bf16(q_wide.hv().ptr<float>()[i]);
        q16.hv().ptr<uint16_t>()[i] = h, q_wide.hv().ptr<float>()[i] = bf16_to_f32(h);
    }
    q16.upload(), q_wide.upload(), q_scratch.poison();
    std::vector<Pair> ring(n), ring_src(n), comp(n), picks(n);
    for (size_t i = 0; i < n; ++i) {
        const AttnJob& j = spec[i];
        for (int64_t t = 0; t < j.L; ++t) pos.hv().ptr<int32_t>()[row0[i] + t] = int32_t(j.pos0 + t);
        ring[i] = Pair(DType::kF32, {window - 1, hd}), ring_src[i] = Pair(DType::kF32, {window - 1, hd});
        fill_uniform(ring[i]);
        std::memcpy(ring_src[i].hv().data, ring[i].hv().data, ring[i].hv().nbytes()), ring_src[i].upload();
        fill_entries(j, hd, comp[i], picks[i]);
    }
    pos.upload();
    auto call = [&](bool src) {
        const Pair& qq = src ? q_scratch : q_wide;
        const Pair& o = src ? o_src : o_wide;
        std::vector<ops::AttentionArgs> jobs;
        std::vector<ops::WindowStoreArgs> stores;
        for (size_t i = 0; i < n; ++i) {
            const AttnJob& j = spec[i];
            jobs.push_back(job_args(j, true, qq.dv().rows(row0[i], j.L), kv.dv().rows(row0[i], j.L),
                                    o.dv().rows(row0[i], j.L), src ? ring_src[i] : ring[i], comp[i], picks[i],
                                    sinks, window, true));
            stores.push_back({jobs.back().kv, jobs.back().ring, j.pos0});
        }
        const ops::RopeArgs ro{
            .x = o.dv(), .positions = pos.dv(), .inv_freq = inv.dv(), .mscale = 1.25f, .inverse = true};
        const ops::QueryPrep prep{
            .rope = {.x = qq.dv(), .positions = pos.dv(), .inv_freq = inv.dv(), .mscale = 1.25f},
            .eps = 1e-6f,
            .src = src ? q16.dv() : TensorView{}};
        b.gpu->attentions_stored(jobs, stores, ro, &prep, nullptr);
    };
    o_wide.poison(), o_src.poison();
    call(false);
    const int64_t casts = b.gpu->dispatch_count("cast", "cuda");
    call(true);
    EXPECT_EQ(b.gpu->dispatch_count("cast", "cuda") - casts, 2);  // the decode job's and the 3-row chunk's
    const std::vector<float> w = o_wide.device_f32(), s = o_src.device_f32();
    EXPECT_EQ(0, std::memcmp(w.data(), s.data(), w.size() * sizeof(float))) << "output";
    for (size_t i = 0; i < n; ++i) {
        const std::vector<float> a = ring[i].device_f32(), f = ring_src[i].device_f32();
        EXPECT_EQ(0, std::memcmp(a.data(), f.data(), a.size() * sizeof(float))) << "ring " << i;
    }
}

using ops::cases::CompressCase;
// The CUDA cases of the compressor table (ops/op_cases.h).
const std::vector<CompressCase> kCompress = ops::cases::compress_cases(ops::cases::kCudaTest);

class CudaCompress : public ::testing::TestWithParam<CompressCase> {};

// The table's kCompressCuda: entries within its bound, the state exact.
TEST_P(CudaCompress, MatchesRefIncludingState) {
    SKIP_WITHOUT_GPU();
    const CompressCase& c = GetParam();
    auto& b = backends();
    const int64_t width = c.overlap ? 2 * c.d : c.d, n_new = ops::CompressArgs::n_new(c.pos0, c.L, c.rate);
    Pair kv(DType::kF32, {c.L, width}), gate(DType::kF32, {c.L, width}), bias(DType::kF32, {c.rate, width});
    Pair bkv(DType::kF32, {c.rate, width}), bgate(DType::kF32, {c.rate, width});
    Pair okv(DType::kF32, {c.rate, c.d}), ogate(DType::kF32, {c.rate, c.d});
    Pair out(DType::kF32, {std::max<int64_t>(n_new, 1), c.d});
    fill_uniform(kv), fill_uniform(gate, -3, 3), fill_uniform(bias), fill_uniform(bkv),
        fill_uniform(bgate, -3, 3);
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
    if (n_new > 0) expect_close(out, ops::cases::kCompressCuda.value, std::string(c.name) + " entries");
    expect_close(bkv, 0.0, std::string(c.name) + " buf_kv");
    expect_close(bgate, 0.0, std::string(c.name) + " buf_gate");
    if (c.overlap) {
        expect_close(okv, 0.0, std::string(c.name) + " ovl_kv");
        expect_close(ogate, 0.0, std::string(c.name) + " ovl_gate");
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaCompress, ::testing::ValuesIn(kCompress),
                         [](const auto& tp) { return std::string(tp.param.name); });

using ops::cases::IndexerCase;
// The CUDA cases of the indexer table (ops/op_cases.h).
const std::vector<IndexerCase> kIndexer = ops::cases::indexer_cases(ops::cases::kCudaTest);

class CudaIndexer : public ::testing::TestWithParam<VariantRun<IndexerCase>> {};

// Picks must equal ref's exactly (the table's kIndexerPicks); the only allowed difference is between entries
// whose (double) scores are within 1e-5 relative of each other (f32 vs double accumulation can order such
// near-ties differently).
TEST_P(CudaIndexer, PicksMatchRef) {
    SKIP_WITHOUT_GPU();
    const IndexerCase& c = GetParam().c;
    const std::string variant = GetParam().variant;
    auto& b = backends();
    Pair q(DType::kF32, {c.L, c.H, c.dim}), w(DType::kF32, {c.L, c.H}), keys(DType::kF32, {c.T, c.dim});
    Pair picks(DType::kI32, {c.L, c.k});
    fill_uniform(q), fill_uniform(w), fill_uniform(keys);
    if (c.keys == ops::cases::IndexerKeys::kManyZeroScores) {  // keys of entries w % 4 != 0 point away from
                                                               // every query: ReLU gives 0
        for (int64_t i = 0; i < q.hv().numel(); ++i)
            q.hv().ptr<float>()[i] = std::abs(q.hv().ptr<float>()[i]);
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
    ASSERT_TRUE(b.gpu->force_variant("indexer_topk", variant));
    const int64_t ran = variant.empty() ? 0 : b.gpu->dispatch_count("indexer_topk", variant);
    b.gpu->indexer_topk({q.dv(), w.dv(), keys.dv(), picks.dv(), c.pos0, c.rate, ws, ss});
    ASSERT_TRUE(b.gpu->force_variant("indexer_topk", ""));
    if (!variant.empty()) EXPECT_EQ(b.gpu->dispatch_count("indexer_topk", variant), ran + 1) << variant;
    const auto got = picks.device_as<int32_t>();
    const int32_t* want = picks.hv().ptr<int32_t>();
    auto score = [&](int64_t t, int64_t e) {
        double s = 0;
        for (int64_t h = 0; h < c.H; ++h) {
            double dot = 0;
            for (int64_t j = 0; j < c.dim; ++j)
                dot += double(q.hv().ptr<float>()[(t * c.H + h) * c.dim + j]) *
                       keys.hv().ptr<float>()[e * c.dim + j];
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

// The native precision's tensor-core scores (variant mma: q and keys rounded to f16) on the cases of its
// shape (64 heads x 128): picks may differ from ref's only where the rounding can reorder them. Each dot's
// error is at most (2 * 2^-11 + 2^-22 + 128 * 2^-24) sum_j |q_hj k_j| (two f16 roundings, their product, f32
// sums), relu keeps it and the heads' weighted sum adds it up: E(e) = ws ss sum_h |w_h| 1.1e-3 sum_j |q_hj
// k_ej|. Every entry picked over a missed one, and every pair of neighbours in the pick order, must then be
// within E of each other; the counts of valid picks must match exactly. The walking blocks' picks equal the
// default's.
TEST(CudaIndexerNative, MmaPicksWithinTheF16Bound) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    for (const IndexerCase& c : kIndexer) {
        if (c.H != 64 || c.dim != 128) continue;
        Pair q(DType::kF32, {c.L, c.H, c.dim}), w(DType::kF32, {c.L, c.H}), keys(DType::kF32, {c.T, c.dim});
        Pair picks(DType::kI32, {c.L, c.k});
        fill_uniform(q), fill_uniform(w), fill_uniform(keys);
        picks.poison();
        const float ws = 1.0f / std::sqrt(float(c.H)), ss = 1.0f / std::sqrt(float(c.dim));
        b.ref->indexer_topk({q.hv(), w.hv(), keys.hv(), picks.hv(), c.pos0, c.rate, ws, ss});
        const int32_t* const ref_picks = picks.hv().ptr<int32_t>();
        const std::vector<int32_t> want(ref_picks, ref_picks + c.L * c.k);  // (picks is poisoned below)
        ASSERT_TRUE(b.gpu->force_variant("indexer_topk", "mma"));
        const int64_t ran = b.gpu->dispatch_count("indexer_topk", "mma");
        ops::IndexerTopkArgs a{q.dv(), w.dv(), keys.dv(), picks.dv(), c.pos0, c.rate, ws, ss};
        a.f16 = true;
        cuda::set_indexer_mma_walk(0);  // blocks of one tile
        b.gpu->indexer_topk(a);
        const auto got = picks.device_as<int32_t>();
        // the blocks that walk every tile: the same scores, so the same picks
        cuda::set_indexer_mma_walk(1);
        picks.poison();
        b.gpu->indexer_topk(a);
        cuda::set_indexer_mma_walk(2);
        EXPECT_EQ(picks.device_as<int32_t>(), got) << c.name << ": walking blocks";
        ASSERT_TRUE(b.gpu->force_variant("indexer_topk", ""));
        EXPECT_EQ(b.gpu->dispatch_count("indexer_topk", "mma"), ran + 2) << c.name;
        const float* qh = q.hv().ptr<float>();
        const float* kh = keys.hv().ptr<float>();
        const float* wh = w.hv().ptr<float>();
        auto score = [&](int64_t t, int64_t e, double& bound) {
            double s = 0;
            bound = 0;
            for (int64_t h = 0; h < c.H; ++h) {
                double dot = 0, mag = 0;
                for (int64_t j = 0; j < c.dim; ++j) {
                    const double x = double(qh[(t * c.H + h) * c.dim + j]) * kh[e * c.dim + j];
                    dot += x, mag += std::abs(x);
                }
                s += std::max(dot, 0.0) * ss * wh[t * c.H + h] * ws;
                bound += 1.1e-3 * mag * ss * std::abs(wh[t * c.H + h]) * ws;
            }
            bound += 1e-6 * std::abs(s);
            return s;
        };
        for (int64_t t = 0; t < c.L; ++t) {
            std::set<int32_t> g, r;
            for (int64_t i = 0; i < c.k; ++i) {
                if (got[size_t(t * c.k + i)] >= 0) g.insert(got[size_t(t * c.k + i)]);
                if (want[size_t(t * c.k + i)] >= 0) r.insert(want[size_t(t * c.k + i)]);
            }
            ASSERT_EQ(g.size(), r.size()) << c.name << " query " << t << ": valid picks";
            double worst_in = INFINITY,
                   best_out = -INFINITY;  // min (s + E) picked only here, max (s - E) missed
            for (int32_t e : g)
                if (!r.count(e)) {
                    double bound = 0;
                    const double s = score(t, e, bound);
                    worst_in = std::min(worst_in, s + bound);
                }
            for (int32_t e : r)
                if (!g.count(e)) {
                    double bound = 0;
                    const double s = score(t, e, bound);
                    best_out = std::max(best_out, s - bound);
                }
            EXPECT_LE(best_out, worst_in)
                << c.name << " query " << t << ": an entry picked over a better one "
                << "beyond the f16 bound";
            for (int64_t i = 0; i + 1 < int64_t(g.size()); ++i) {  // the order, best first
                double b0 = 0, b1 = 0;
                const double s0 = score(t, got[size_t(t * c.k + i)], b0);
                const double s1 = score(t, got[size_t(t * c.k + i + 1)], b1);
                EXPECT_LE(s1 - b1, s0 + b0) << c.name << " query " << t << " position " << i;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaIndexer,
                         ::testing::ValuesIn(variant_runs(kIndexer, {"", "tiled", "warp_heads", "block"})),
                         VariantRunName());

}  // namespace
}  // namespace di::gputest
