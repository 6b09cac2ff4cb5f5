// route, moe, mhc_pre, mhc_post and hc_head on CUDA vs ref. Expert ids must match exactly (lower id first on
// ties); everything else within f32-vs-double accumulation error.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <tuple>

#include "gpu_test_util.h"
#include "ops/cuda/kernels.h"
#include "ops/op_cases.h"
#include "ops/op_cases_rows.h"

namespace di::gputest {
namespace {

#define SKIP_WITHOUT_GPU() \
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

using ops::cases::RouteCase;

class CudaRoute : public ::testing::TestWithParam<RouteCase> {};

TEST_P(CudaRoute, IdsExactWeightsClose) {
    SKIP_WITHOUT_GPU();
    const RouteCase& c = GetParam();
    auto& b = backends();
    const int64_t vocab = 50;
    Pair logits(DType::kF32, {c.n, c.E}), bias(DType::kF32, {c.E}), ids(DType::kI32, {c.n, c.k});
    Pair weights(DType::kF32, {c.n, c.k}), tokens(DType::kI32, {c.n});
    Pair tid(c.i64 ? DType::kI64 : DType::kI32, {vocab, c.k});
    fill_uniform(logits, -4, 4), fill_uniform(bias, -0.5f, 0.5f);
    if (c.ties)  // 4 distinct values: many equal scores at the k-th place
        for (int64_t i = 0; i < logits.hv().numel(); ++i) logits.hv().ptr<float>()[i] = float(rng()() % 4);
    logits.upload();
    for (int64_t t = 0; t < c.n; ++t) tokens.hv().ptr<int32_t>()[t] = int32_t(rng()() % vocab);
    for (int64_t v = 0; v < vocab; ++v) {
        std::vector<int> perm(size_t(c.E));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng());
        for (int64_t j = 0; j < c.k; ++j) {
            if (c.i64)
                tid.hv().ptr<int64_t>()[v * c.k + j] = perm[size_t(j)];
            else
                tid.hv().ptr<int32_t>()[v * c.k + j] = perm[size_t(j)];
        }
    }
    tokens.upload(), tid.upload(), ids.poison(), weights.poison();
    auto make = [&](bool d) {
        ops::RouteArgs a;
        a.logits = d ? logits.dv() : logits.hv();
        if (c.bias) a.bias = d ? bias.dv() : bias.hv();
        if (c.hash) a.tid2eid = d ? tid.dv() : tid.hv(), a.tokens = d ? tokens.dv() : tokens.hv();
        a.ids = d ? ids.dv() : ids.hv();
        a.weights = d ? weights.dv() : weights.hv();
        a.func = c.func, a.scaling = 1.5f;
        return a;
    };
    b.ref->route(make(false));
    b.gpu->route(make(true));
    const auto got = ids.device_as<int32_t>();
    for (int64_t i = 0; i < c.n * c.k; ++i)
        EXPECT_EQ(got[size_t(i)], ids.hv().ptr<int32_t>()[i]) << c.name << " slot " << i;  // kRouteIdsExact
    expect_close(weights, ops::cases::kRouteWeightsCuda.value, c.name);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaRoute, ::testing::ValuesIn(ops::cases::route_cases()),
                         [](const auto& tp) { return std::string(tp.param.name); });

using ops::cases::MoeCase;
// The CUDA cases of the moe table (ops/op_cases.h).
const std::vector<MoeCase> kMoe = ops::cases::moe_cases(ops::cases::kCudaTest);

// Every moe variant of the CUDA backend on every case it applies to ("" = the default dispatch).
using MoeRun = VariantRun<MoeCase>;

class CudaMoe : public ::testing::TestWithParam<MoeRun> {};

// Tolerance: the table's kMoeCuda (f32 dot products of length D and I against double; mma's hi + lo f16
// halves carry 22 bits of each activation, its products are exact and its sums f32). The grouped, split_rows
// and mma variants must also be batch-invariant: token 0 computed alone equals its row in the batch, bit for
// bit (for split_rows that compares its one-token path, without a plan, with the planned path).
TEST_P(CudaMoe, MatchesRef) {
    SKIP_WITHOUT_GPU();
    const MoeCase& c = GetParam().c;
    const std::string variant = GetParam().variant;
    const bool applies =
        c.fmt != ops::WeightFormat::kDense || variant != "grouped";  // D = 65: no 16-byte rows
    if (!applies) GTEST_SKIP() << "grouped needs 16-byte weight rows";
    auto split_dim = [](int64_t d) { return d == 1024 || d == 2048 || d == 4096 || d == 8192; };
    const bool split_ok = split_dim(c.D) && split_dim(c.I);
    if (variant == "split_rows" && !split_ok)
        GTEST_SKIP() << "split_rows needs hidden and moe_dim of 1024, 2048, 4096 or 8192";
    if (variant == "w4a8" && (c.fmt != ops::WeightFormat::kFp4Group || c.D % 128 != 0 || c.I % 128 != 0 ||
                              c.wide_scales || !c.act_fp8))
        GTEST_SKIP() << "w4a8 needs native precision, fp4 experts with a chunk's group scales within 2^11, "
                        "hidden and moe_dim multiples of 128";
    if ((variant == "mma" || variant == "gemm" || variant == "wgmma") &&
        (c.fmt != ops::WeightFormat::kFp4Group || c.D % 128 != 0 || c.I % 128 != 0 || c.wide_scales))
        GTEST_SKIP() << variant
                     << " needs fp4 experts with scales in [2^-23, 2^1], hidden and moe_dim multiples of 128";
    auto& b = backends();
    // The experts of a case are drawn once and shared by its variants (256 FP4 experts take ~40 s to draw).
    static std::map<std::string, std::pair<std::vector<Pair>, std::vector<Pair>>> cache;
    const bool drawn = cache.count(c.name) > 0;
    std::vector<Pair>& data = cache[c.name].first;
    std::vector<Pair>& scale = cache[c.name].second;
    auto make_w = [&](int64_t out, int64_t in) {
        if (c.fmt == ops::WeightFormat::kDense) {
            data.emplace_back(DType::kF32, std::initializer_list<int64_t>{out, in});
            fill_uniform(data.back(), -0.1f, 0.1f);
            scale.emplace_back();
        } else if (c.fmt == ops::WeightFormat::kFp8Block) {
            data.emplace_back(DType::kF8E4M3, std::initializer_list<int64_t>{out, in});
            fill_fp8(data.back());
            scale.emplace_back(DType::kE8M0,
                               std::initializer_list<int64_t>{(out + 127) / 128, (in + 127) / 128});
            fill_e8m0(scale.back());
        } else {
            data.emplace_back(DType::kFP4x2, std::initializer_list<int64_t>{out, in / 2});
            fill_uniform(data.back());
            scale.emplace_back(DType::kE8M0, std::initializer_list<int64_t>{out, in / 32});
            fill_e8m0(scale.back());
            if (c.chunk_scales) {  // scale of row r, group i: 2^(-15 + (5 (i / 4) + r) % 17)
                auto* sb = static_cast<uint8_t*>(scale.back().hv().data);
                for (int64_t r = 0; r < out; ++r)
                    for (int64_t i = 0; i < in / 32; ++i)
                        sb[r * (in / 32) + i] = uint8_t(112 + (5 * (i / 4) + r) % 17);
                scale.back().upload();
            }
            if (c.small_ints) {  // nibbles of 0, +-1, +-2 (magnitude codes 0, 2, 4), every scale 2^-3
                auto* wb = static_cast<uint8_t*>(data.back().hv().data);
                auto nib = [] { return uint8_t(2 * (rng()() % 3) | (rng()() % 2) << 3); };
                for (size_t i = 0; i < data.back().hv().nbytes(); ++i) wb[i] = uint8_t(nib() | nib() << 4);
                data.back().upload();
                std::memset(scale.back().hv().data, 124, scale.back().hv().nbytes());
                scale.back().upload();
            }
            if (c.wide_scales) {
                auto* sb = static_cast<uint8_t*>(scale.back().hv().data);
                for (size_t i = 0; i < scale.back().hv().nbytes(); ++i) sb[i] = uint8_t(96 + rng()() % 40);
                scale.back().upload();
            }
        }
    };
    if (!drawn) {
        data.reserve(size_t(3 * c.E)), scale.reserve(size_t(3 * c.E));
        for (int64_t e = 0; e < c.E; ++e) make_w(c.I, c.D), make_w(c.I, c.D), make_w(c.D, c.I);
    }
    auto experts = [&](bool d) {
        std::vector<ops::ExpertWeights> v(size_t(c.E));
        for (int64_t e = 0; e < c.E; ++e) {
            ops::QWeight* ws[3] = {&v[size_t(e)].w1, &v[size_t(e)].w3, &v[size_t(e)].w2};
            for (int j = 0; j < 3; ++j) {
                const size_t i = size_t(3 * e + j);
                ws[j]->format = c.fmt;
                ws[j]->data = d ? data[i].dv() : data[i].hv();
                if (c.fmt != ops::WeightFormat::kDense) ws[j]->scale = d ? scale[i].dv() : scale[i].hv();
                ws[j]->out_dim = j == 2 ? c.D : c.I;
                ws[j]->in_dim = j == 2 ? c.I : c.D;
            }
        }
        return v;
    };
    const auto ew_h = experts(false), ew_d = experts(true);
    Pair x(DType::kF32, {c.n, c.D}), ids(DType::kI32, {c.n, c.k}), w(DType::kF32, {c.n, c.k}),
        out(DType::kF32, {c.n, c.D});
    fill_uniform(x), fill_uniform(w, 0.1f, 1.0f), out.poison();
    if (c.small_ints) {
        for (int64_t i = 0; i < x.hv().numel(); ++i) x.hv().ptr<float>()[i] = rng()() % 2 ? 1.0f : -1.0f;
        x.upload();
    }
    for (int64_t t = 0; t < c.n; ++t) {
        std::vector<int> perm(size_t(c.E));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng());
        for (int64_t j = 0; j < c.k; ++j) ids.hv().ptr<int32_t>()[t * c.k + j] = perm[size_t(j)];
    }
    ids.upload();
    if (c.E <= 8)  // few experts: many tokens share each one (several token passes per expert)
        for (int64_t i = 0; i < c.n * c.k; ++i) ids.hv().ptr<int32_t>()[i] = int32_t((i * 7 + i / c.k) % c.E);
    for (int64_t t = 0; t < c.n && c.E <= 8; ++t)  // distinct experts within a token, as routing gives
        if (ids.hv().ptr<int32_t>()[t * c.k] == ids.hv().ptr<int32_t>()[t * c.k + 1])
            ids.hv().ptr<int32_t>()[t * c.k + 1] = (ids.hv().ptr<int32_t>()[t * c.k] + 1) % int32_t(c.E);
    ids.upload();
    ASSERT_TRUE(b.gpu->force_variant("moe", variant)) << variant;
    const int64_t mma_before = b.gpu->dispatch_count("moe", "mma"),
                  gemm_before = b.gpu->dispatch_count("moe", "gemm"),
                  w4a8_before = b.gpu->dispatch_count("moe", "w4a8");
    const ops::ActQuant act = c.act_fp8 ? ops::ActQuant::kFp8Block128 : ops::ActQuant::kNone;
    b.ref->moe({x.hv(), ids.hv(), w.hv(), ew_h.data(), c.E, out.hv(), c.limit, act});
    b.gpu->moe({x.dv(), ids.dv(), w.dv(), ew_d.data(), c.E, out.dv(), c.limit, act});
    // w4a8's FP8 sums (kMoeW4a8Cuda) wherever it ran, but with exact up sums the native bound
    const bool w4a8_ran = b.gpu->dispatch_count("moe", "w4a8") > w4a8_before;
    expect_close(out,
                 (!c.act_fp8                  ? ops::cases::kMoeCuda
                  : w4a8_ran && !c.small_ints ? ops::cases::kMoeW4a8Cuda
                                              : ops::cases::kMoeNativeCuda)
                     .value,
                 c.name);
    if (c.wide_scales) {
        EXPECT_EQ(b.gpu->dispatch_count("moe", "mma"), mma_before) << "mma took wide scales";
        EXPECT_EQ(b.gpu->dispatch_count("moe", "gemm"), gemm_before) << "gemm took wide scales";
        EXPECT_EQ(b.gpu->dispatch_count("moe", "w4a8"), w4a8_before) << "w4a8 took wide scales";
    }
    if (!variant.empty()) {
        EXPECT_GT(b.gpu->dispatch_count("moe", variant), 0) << variant << " did not run";
    }
    if (variant == "w4a8") {  // the warp-specialised kernel: the same products and sums, so the same bits
        const std::vector<float> one_wg = out.device_f32();
        out.poison();
        cuda::set_moe_w4a8_ws(true);
        b.gpu->moe({x.dv(), ids.dv(), w.dv(), ew_d.data(), c.E, out.dv(), c.limit, act});
        cuda::set_moe_w4a8_ws(false);
        const std::vector<float> got = out.device_f32();
        EXPECT_EQ(0, std::memcmp(one_wg.data(), got.data(), got.size() * sizeof(float)))
            << c.name << ": the warp-specialised kernel differs from the one-warpgroup kernel (max abs "
            << diff(one_wg, got).max_abs << ")";
        std::memcpy(out.hv().data, one_wg.data(), one_wg.size() * sizeof(float));
        out.upload();
    }
    if ((variant == "grouped" || variant == "split_rows" || variant == "mma" || variant == "gemm" ||
         variant == "w4a8") &&
        c.n > 1) {  // token 0 alone
        Pair one(DType::kF32, {1, c.D});
        one.poison();
        b.gpu->moe({x.dv().rows(0, 1), ids.dv().rows(0, 1), w.dv().rows(0, 1), ew_d.data(), c.E, one.dv(),
                    c.limit, act});
        const std::vector<float> all = out.device_f32(), alone = one.device_f32();
        EXPECT_EQ(0, std::memcmp(all.data(), alone.data(), size_t(c.D) * sizeof(float)))
            << c.name
            << ": token 0 "
               "alone differs from its row in the batch";
        if (variant == "mma")  // the weights staged in shared memory: the same sums, alone and in the batch
            for (const int stages : {4, 8}) {
                cuda::set_moe_mma_stages(stages);
                one.poison();
                b.gpu->moe({x.dv().rows(0, 1), ids.dv().rows(0, 1), w.dv().rows(0, 1), ew_d.data(), c.E,
                            one.dv(), c.limit, act});
                Pair batch(DType::kF32, {c.n, c.D});
                batch.poison();
                b.gpu->moe({x.dv(), ids.dv(), w.dv(), ew_d.data(), c.E, batch.dv(), c.limit, act});
                cuda::set_moe_mma_stages(0);
                const std::vector<float> staged = one.device_f32(), staged_all = batch.device_f32();
                EXPECT_EQ(0, std::memcmp(all.data(), staged.data(), size_t(c.D) * sizeof(float)))
                    << c.name << ": token 0 alone, weights staged " << stages
                    << " chunks ahead, differs from its row in the batch";
                EXPECT_EQ(0, std::memcmp(all.data(), staged_all.data(), all.size() * sizeof(float)))
                    << c.name << ": the batch with its weights staged " << stages << " chunks ahead differs";
            }
        if (c.act_fp8 && variant == "mma") {  // one token quantising x and h in the kernel: the same bits
            cuda::set_act_quant_in_kernels(true);
            one.poison();
            b.gpu->moe({x.dv().rows(0, 1), ids.dv().rows(0, 1), w.dv().rows(0, 1), ew_d.data(), c.E, one.dv(),
                        c.limit, act});
            cuda::set_act_quant_in_kernels(false);
            const std::vector<float> fused = one.device_f32();
            EXPECT_EQ(0, std::memcmp(all.data(), fused.data(), size_t(c.D) * sizeof(float)))
                << c.name << ": token 0 alone, quantised in the kernel, differs from its row in the batch";
        }
    }
    {  // expert parallelism on two ranks (ops/moe.h): each rank's `experts` pass over its half of the experts
       // (the other half not placed: empty views), the slots summed (exact: a pair is non-zero on one rank),
       // then `combine`: bit-identical to the one call
        const std::vector<float> whole = out.device_f32();
        Pair slots(DType::kF32, {c.n, c.k, c.D}), summed(DType::kF32, {c.n, c.k, c.D}),
            ep(DType::kF32, {c.n, c.D});
        std::vector<float> acc(size_t(c.n * c.k * c.D), 0.0f);
        for (int64_t r = 0; r < 2; ++r) {
            const int64_t first = r * c.E / 2, end = (r + 1) * c.E / 2;
            auto ew = experts(true);
            for (int64_t e = 0; e < c.E; ++e)
                if (e < first || e >= end)
                    for (ops::QWeight* q : {&ew[size_t(e)].w1, &ew[size_t(e)].w3, &ew[size_t(e)].w2})
                        q->data = TensorView{}, q->scale = TensorView{};
            ops::MoeArgs a{x.dv(), ids.dv(), w.dv(), ew.data(), c.E, out.dv(), c.limit, act};
            a.pass = ops::MoeArgs::Pass::kExperts, a.slots = slots.dv(), a.expert_first = first,
            a.expert_end = end;
            slots.poison();
            b.gpu->moe(a);
            const std::vector<float> part = slots.device_f32();
            for (size_t i = 0; i < acc.size(); ++i) acc[i] += part[i];
        }
        std::memcpy(summed.hv().data, acc.data(), acc.size() * sizeof(float));
        summed.upload();
        ep.poison();
        ops::MoeArgs a{x.dv(), ids.dv(), w.dv(), ew_d.data(), c.E, ep.dv(), c.limit, act};
        a.pass = ops::MoeArgs::Pass::kCombine, a.slots = summed.dv();
        b.gpu->moe(a);
        const std::vector<float> split = ep.device_f32();
        EXPECT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)))
            << c.name << ": two expert-parallel passes differ from the one call";
    }
    ASSERT_TRUE(b.gpu->force_variant("moe", ""));
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaMoe,
                         ::testing::ValuesIn(variant_runs(kMoe, {"", "w4a8", "wgmma", "gemm", "mma",
                                                                 "split_rows", "grouped", "per_pair"})),
                         VariantRunName());

// E fp4 experts (W1 and W3 [I, D], W2 [D, I]) into ew_h (host views) and ew_d (device views): each weight
// byte from byte(), the UE8M0 scale of row r's group i from scale_byte(r, i). The Pairs stay in data and
// scale, which the caller reserves (their views must not move).
template <class Byte, class ScaleByte>
void make_fp4_experts(int64_t E, int64_t D, int64_t I, Byte&& byte, ScaleByte&& scale_byte,
                      std::vector<Pair>& data, std::vector<Pair>& scale,
                      std::vector<ops::ExpertWeights>& ew_h, std::vector<ops::ExpertWeights>& ew_d) {
    ew_h.assign(static_cast<size_t>(E), {}), ew_d.assign(static_cast<size_t>(E), {});
    for (int64_t e = 0; e < E; ++e)
        for (int j = 0; j < 3; ++j) {
            const int64_t out = j == 2 ? D : I, in = j == 2 ? I : D;
            data.emplace_back(DType::kFP4x2, std::initializer_list<int64_t>{out, in / 2});
            auto* wb = static_cast<uint8_t*>(data.back().hv().data);
            for (size_t i = 0; i < data.back().hv().nbytes(); ++i) wb[i] = byte();
            data.back().upload();
            scale.emplace_back(DType::kE8M0, std::initializer_list<int64_t>{out, in / 32});
            auto* sb = static_cast<uint8_t*>(scale.back().hv().data);
            for (int64_t r = 0; r < out; ++r)
                for (int64_t i = 0; i < in / 32; ++i) sb[r * (in / 32) + i] = scale_byte(r, i);
            scale.back().upload();
            for (const bool d : {false, true}) {
                ops::ExpertWeights& x = (d ? ew_d : ew_h)[size_t(e)];
                ops::QWeight& q = j == 0 ? x.w1 : j == 1 ? x.w3 : x.w2;
                q.format = ops::WeightFormat::kFp4Group;
                q.data = d ? data.back().dv() : data.back().hv();
                q.scale = d ? scale.back().dv() : scale.back().hv();
                q.out_dim = out, q.in_dim = in;
            }
        }
}

// Each of n tokens' k distinct experts of E, in random order (ids [n, k], uploaded).
void distinct_expert_ids(Pair& ids, int64_t n, int64_t k, int64_t E) {
    for (int64_t t = 0; t < n; ++t) {
        std::vector<int> perm(static_cast<size_t>(E));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng());
        for (int64_t j = 0; j < k; ++j) ids.hv().ptr<int32_t>()[t * k + j] = perm[size_t(j)];
    }
    ids.upload();
}

// w4a8's options written before their first GPU run, on inputs whose up sums are exact (x +-1, weights 0,
// +-1, +-2, a chunk's four group scales alike): 64-row tiles (set_moe_w4a8_n64) and the token copies by
// 32-bit unit offsets (set_moe_w4a8_units), each combination within the f32 variants' 1e-3 of the reference,
// and the unit offsets the same bits as the default addressing (the same bytes land in the same places), the
// warp-specialised kernel (set_moe_w4a8_ws) the same bits as the default; with scales that fold a row at a
// time and scales that fold a chunk at a time only, several token tiles an expert.
TEST(CudaMoeW4a8, OptionsMatchTheReference) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    const int64_t E = 16, k = 8;
    // Every pass's experts stay allocated: the backend's expert table is keyed by the weights' addresses (a
    // model's weights do not change while it is loaded), so a later pass's weights must not reuse an earlier
    // one's addresses with other scales.
    std::vector<Pair> data, scale;
    data.reserve(size_t(12 * E)), scale.reserve(size_t(12 * E));
    const bool once_default = cuda::moe_w4a8_scales_once(), persist_default = cuda::moe_w4a8_persist();
    const int ss_default = cuda::moe_w4a8_bulk_ss();
    const bool narrow_default = cuda::moe_w4a8_ss_narrow();
    cuda::set_moe_w4a8_bulk_ss(0);          // moe_w4a8_kernel's forms first, the converting kernel's below
    cuda::set_moe_w4a8_persist(false);      // the persistent form where the loop below names it
    cuda::set_moe_w4a8_scales_once(false);  // the other passes with the scales in the stages
    // odd chunk counts (5 and 3), then chunk counts that are multiples of 4 (16 and 4: the scales-once
    // copies, up's rows four 16-byte units each, two a thread, down's one); ~150 pairs an expert, so tiles
    // end inside an expert; then ~90 pairs an expert (the converting kernel's narrow tiles: n96 and n128).
    for (const auto& [n, D, I] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {260, 640, 384}, {300, 2048, 512}, {180, 2048, 512}})
        for (const bool chunk_scales : {false, true}) {
            std::vector<ops::ExpertWeights> ew_h, ew_d;
            auto nib = [] { return uint8_t(2 * (rng()() % 3) | (rng()() % 2) << 3); };
            make_fp4_experts(
                E, D, I, [&] { return uint8_t(nib() | nib() << 4); },
                [&](int64_t r, int64_t i) {
                    return uint8_t(chunk_scales ? 112 + (5 * (i / 4) + r) % 17 : 124);
                },
                data, scale, ew_h, ew_d);
            Pair x(DType::kF32, {n, D}), ids(DType::kI32, {n, k}), w(DType::kF32, {n, k}),
                out(DType::kF32, {n, D}), ref(DType::kF32, {n, D});
            for (int64_t i = 0; i < x.hv().numel(); ++i) x.hv().ptr<float>()[i] = rng()() % 2 ? 1.0f : -1.0f;
            x.upload(), fill_uniform(w, 0.1f, 1.0f);
            distinct_expert_ids(ids, n, k, E);
            const ops::ActQuant act = ops::ActQuant::kFp8Block128;
            b.ref->moe({x.hv(), ids.hv(), w.hv(), ew_h.data(), E, ref.hv(), 10.0f, act});
            ASSERT_TRUE(b.gpu->force_variant("moe", "w4a8"));
            for (const bool n64 : {false, true}) {
                std::vector<float> got[2];
                for (const bool units : {false, true}) {
                    cuda::set_moe_w4a8_n64(n64), cuda::set_moe_w4a8_units(units);
                    out.poison();
                    b.gpu->moe({x.dv(), ids.dv(), w.dv(), ew_d.data(), E, out.dv(), 10.0f, act});
                    cuda::set_moe_w4a8_n64(false), cuda::set_moe_w4a8_units(false);
                    const std::string tag = std::string(chunk_scales ? "chunk" : "row") + " fold, " +
                                            (n64 ? "64" : "128") + "-row tiles, unit offsets " +
                                            (units ? "on" : "off");
                    got[units] = out.device_f32();
                    const Diff d = diff(ref.host_f32(), got[units]);
                    EXPECT_EQ(d.nan, 0) << tag;
                    EXPECT_LE(d.rel_l2, ops::cases::kMoeNativeCuda.value)
                        << tag << ": max abs err " << d.max_abs;
                }
                EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)))
                    << (chunk_scales ? "chunk" : "row") << " fold, " << (n64 ? 64 : 128) << "-row tiles";
                // one warpgroup a block (two are the default): the same bits
                cuda::set_moe_w4a8_wg2(false), cuda::set_moe_w4a8_n64(n64);
                out.poison();
                b.gpu->moe({x.dv(), ids.dv(), w.dv(), ew_d.data(), E, out.dv(), 10.0f, act});
                cuda::set_moe_w4a8_wg2(true), cuda::set_moe_w4a8_n64(false);
                const std::vector<float> wg1 = out.device_f32();
                EXPECT_EQ(0, std::memcmp(got[0].data(), wg1.data(), wg1.size() * sizeof(float)))
                    << (chunk_scales ? "chunk" : "row") << " fold, " << (n64 ? 64 : 128)
                    << "-row tiles, one warpgroup: max abs err against the reference "
                    << diff(ref.host_f32(), wg1).max_abs;
                if (n64) continue;
                // the scales copied once: the default's bits, where the chunk counts allow it
                const int64_t once_before = cuda::moe_w4a8_scales_once_launches();
                cuda::set_moe_w4a8_scales_once(true);
                out.poison();
                b.gpu->moe({x.dv(), ids.dv(), w.dv(), ew_d.data(), E, out.dv(), 10.0f, act});
                cuda::set_moe_w4a8_scales_once(false);
                const std::vector<float> once = out.device_f32();
                const int64_t once_runs = cuda::moe_w4a8_scales_once_launches() - once_before;
                EXPECT_EQ(once_runs, D % 512 == 0 && I % 512 == 0 ? 2 : 0) << "scales-once launches, D " << D;
                EXPECT_EQ(0, std::memcmp(got[0].data(), once.data(), once.size() * sizeof(float)))
                    << (chunk_scales ? "chunk" : "row") << " fold, D " << D
                    << ", scales once: max abs err against "
                    << "the reference " << diff(ref.host_f32(), once).max_abs;
                // the persistent form (its token copies by 64-bit addresses and by unit offsets; and with
                // up's SwiGLU in its epilogue, h written instead of both parts) on row folds with the scales
                // copied once (down's 256 items more than a grid, ~150 pairs an expert two tiles an item):
                // the default's bits
                for (const auto& [units, swiglu_out] :
                     {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
                    const int64_t persist_before = cuda::moe_w4a8_persist_launches(),
                                  swi_before = cuda::moe_w4a8_swiglu_out_launches();
                    cuda::set_moe_w4a8_scales_once(true), cuda::set_moe_w4a8_persist(true);
                    cuda::set_moe_w4a8_units(units), cuda::set_moe_w4a8_swiglu_out(swiglu_out);
                    out.poison();
                    b.gpu->moe({x.dv(), ids.dv(), w.dv(), ew_d.data(), E, out.dv(), 10.0f, act});
                    cuda::set_moe_w4a8_scales_once(false), cuda::set_moe_w4a8_persist(false);
                    cuda::set_moe_w4a8_units(false), cuda::set_moe_w4a8_swiglu_out(false);
                    const std::vector<float> persist = out.device_f32();
                    const bool runs = once_runs > 0 && !chunk_scales;
                    EXPECT_EQ(cuda::moe_w4a8_persist_launches() - persist_before, runs ? 2 : 0)
                        << "persistent launches, D " << D;
                    EXPECT_EQ(cuda::moe_w4a8_swiglu_out_launches() - swi_before, runs && swiglu_out ? 1 : 0)
                        << "SwiGLU-out launches, D " << D;
                    EXPECT_EQ(0, std::memcmp(got[0].data(), persist.data(), persist.size() * sizeof(float)))
                        << (chunk_scales ? "chunk" : "row") << " fold, D " << D
                        << ", persistent, unit offsets " << units << ", SwiGLU out " << swiglu_out
                        << ": max abs err against the reference " << diff(ref.host_f32(), persist).max_abs;
                }
                // the warp-specialised kernel: the default's bits
                cuda::set_moe_w4a8_ws(true);
                out.poison();
                b.gpu->moe({x.dv(), ids.dv(), w.dv(), ew_d.data(), E, out.dv(), 10.0f, act});
                cuda::set_moe_w4a8_ws(false);
                const std::vector<float> opt = out.device_f32();
                EXPECT_EQ(0, std::memcmp(got[0].data(), opt.data(), opt.size() * sizeof(float)))
                    << (chunk_scales ? "chunk" : "row") << " fold, warp-specialised: max abs err against the "
                    << "reference " << diff(ref.host_f32(), opt).max_abs;
                // the bulk-copy kernel alone and in clusters of 2 and 4 (up's 1,024 rows and down's 2,048
                // take both), and its inputs with the weights converted by one or two warpgroups of their own
                // (cluster 0, -1; -2: two, with the narrow tiles; -3: and up's SwiGLU in the epilogue, row
                // folds only; -4: the fp4 rows by TMA, row folds only, both passes): the default's bits where
                // the chunk counts allow it
                for (const int cs : {1, 2, 4, 0, -1, -2, -3, -4}) {
                    const int64_t bulk_before = cuda::moe_w4a8_bulk_launches(),
                                  swi_before = cuda::moe_w4a8_ss_swiglu_launches(),
                                  tma_before = cuda::moe_w4a8_ss_tma_launches();
                    cuda::set_moe_w4a8_bulk(std::max(cs, 0));
                    cuda::set_moe_w4a8_bulk_ss(cs > 0 ? 0 : std::min(1 - cs, 2), cs <= -2);
                    cuda::set_moe_w4a8_ss_swiglu(cs == -3), cuda::set_moe_w4a8_ss_tma(cs == -4);
                    out.poison();
                    b.gpu->moe({x.dv(), ids.dv(), w.dv(), ew_d.data(), E, out.dv(), 10.0f, act});
                    cuda::set_moe_w4a8_bulk(0), cuda::set_moe_w4a8_bulk_ss(0),
                        cuda::set_moe_w4a8_ss_swiglu(false), cuda::set_moe_w4a8_ss_tma(false);
                    const std::vector<float> bulk = out.device_f32();
                    EXPECT_EQ(cuda::moe_w4a8_bulk_launches() - bulk_before,
                              D % 512 == 0 && I % 512 == 0 ? 1 : 0)
                        << "bulk passes, D " << D;
                    EXPECT_EQ(cuda::moe_w4a8_ss_swiglu_launches() - swi_before,
                              cs == -3 && !chunk_scales && D % 512 == 0 && I % 512 == 0 ? 1 : 0)
                        << "SwiGLU-epilogue passes, D " << D;
                    EXPECT_EQ(cuda::moe_w4a8_ss_tma_launches() - tma_before,
                              cs == -4 && !chunk_scales && D % 512 == 0 && I % 512 == 0 ? 2 : 0)
                        << "TMA passes, D " << D;
                    EXPECT_EQ(0, std::memcmp(got[0].data(), bulk.data(), bulk.size() * sizeof(float)))
                        << (chunk_scales ? "chunk" : "row") << " fold, D " << D
                        << ", bulk copies in clusters of " << cs
                        << " (0, -1: 1, 2 converting warpgroups; -2: narrow tiles; -3: SwiGLU out; -4: TMA): "
                           "max abs "
                           "err "
                        << "against the default " << diff(got[0], bulk).max_abs << ", against the reference "
                        << diff(ref.host_f32(), bulk).max_abs;
                }
                // the converting kernel's sums stored as bf16, with the cp.async ring and with TMA: h's e4m3
                // codes come from rounded sums, so not the default's bits; held to the reference, and counted
                for (const bool tma : {false, true}) {
                    const int64_t mid_before = cuda::moe_w4a8_bf16_mid_launches();
                    cuda::set_moe_w4a8_bulk_ss(2, true), cuda::set_moe_w4a8_ss_tma(tma);
                    cuda::set_moe_w4a8_bf16_mid(true);
                    out.poison();
                    b.gpu->moe({x.dv(), ids.dv(), w.dv(), ew_d.data(), E, out.dv(), 10.0f, act});
                    cuda::set_moe_w4a8_bulk_ss(0), cuda::set_moe_w4a8_ss_tma(false);
                    cuda::set_moe_w4a8_bf16_mid(false);
                    const std::vector<float> mid = out.device_f32();
                    EXPECT_EQ(cuda::moe_w4a8_bf16_mid_launches() - mid_before,
                              !chunk_scales && D % 512 == 0 && I % 512 == 0 ? 1 : 0)
                        << "bf16-sum MoE calls, D " << D;
                    const Diff d = diff(ref.host_f32(), mid);
                    std::printf(
                        "moe bf16 sums, %s fold, D %lld, TMA %d: rel L2 %.3g against the reference, %.3g "
                        "against the default (its own %.3g)\n",
                        chunk_scales ? "chunk" : "row", static_cast<long long>(D), int(tma), d.rel_l2,
                        diff(got[0], mid).rel_l2, diff(ref.host_f32(), got[0]).rel_l2);
                    EXPECT_EQ(d.nan, 0);
                    EXPECT_LE(d.rel_l2, ops::cases::kMoeW4a8Bf16Cuda.value)
                        << (chunk_scales ? "chunk" : "row") << " fold, D " << D << ", bf16 sums, TMA " << tma
                        << ": max abs err " << d.max_abs << "; against the default: rel L2 "
                        << diff(got[0], mid).rel_l2;
                }
            }
            ASSERT_TRUE(b.gpu->force_variant("moe", ""));
        }
    cuda::set_moe_w4a8_scales_once(once_default), cuda::set_moe_w4a8_persist(persist_default);
    cuda::set_moe_w4a8_bulk_ss(ss_default, narrow_default);
}

// mma's options for the native precision's batches (both on by default since their first GPU run): 8 tokens a
// pass (set_moe_mma_tok8: the chunks' lo halves are 0, so a token's sums are the 4-token form's) and more
// pairs a pass (set_moe_mma_max_pairs: 300 tokens x 6 in one pass instead of chunks of 170), each and both
// the default's bits; the default within kMoeNativeCuda of the reference. ~112 pairs an expert: passes end
// inside an expert.
TEST(CudaMoeMma, EightTokensAndWiderPassesKeepTheBits) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    const int64_t E = 16, k = 6, n = 300, D = 512, I = 256;
    std::vector<Pair> data, scale;
    data.reserve(size_t(3 * E)), scale.reserve(size_t(3 * E));
    std::vector<ops::ExpertWeights> ew_h, ew_d;
    make_fp4_experts(
        E, D, I, [] { return uint8_t(rng()() & 0xff); },
        [](int64_t r, int64_t i) { return uint8_t(112 + (r + 3 * i) % 17); }, data, scale, ew_h, ew_d);
    Pair x(DType::kF32, {n, D}), ids(DType::kI32, {n, k}), w(DType::kF32, {n, k}), out(DType::kF32, {n, D}),
        ref(DType::kF32, {n, D});
    fill_uniform(x), fill_uniform(w, 0.1f, 1.0f);
    distinct_expert_ids(ids, n, k, E);
    const ops::ActQuant act = ops::ActQuant::kFp8Block128;
    b.ref->moe({x.hv(), ids.hv(), w.hv(), ew_h.data(), E, ref.hv(), 10.0f, act});
    ASSERT_TRUE(b.gpu->force_variant("moe", "mma"));
    const int64_t default_pairs = cuda::moe_mma_max_pairs();
    const bool default_tok8 = cuda::moe_mma_tok8();
    auto run = [&](bool tok8, int64_t max_pairs) {
        cuda::set_moe_mma_tok8(tok8), cuda::set_moe_mma_max_pairs(max_pairs);
        const int64_t before = b.gpu->dispatch_count("moe", "mma");
        out.poison();
        b.gpu->moe({x.dv(), ids.dv(), w.dv(), ew_d.data(), E, out.dv(), 10.0f, act});
        cuda::set_moe_mma_tok8(default_tok8), cuda::set_moe_mma_max_pairs(default_pairs);
        EXPECT_EQ(b.gpu->dispatch_count("moe", "mma") - before, max_pairs >= n * k ? 1 : 2)
            << "mma launches (one per chunk), max pairs " << max_pairs;
        return out.device_f32();
    };
    const std::vector<float> base = run(false, cuda::kMoeGroupedMaxPairs);
    const Diff d = diff(ref.host_f32(), base);
    EXPECT_EQ(d.nan, 0);
    EXPECT_LE(d.rel_l2, ops::cases::kMoeNativeCuda.value) << "max abs err " << d.max_abs;
    for (const auto& [tok8, pairs] : std::vector<std::pair<bool, int64_t>>{
             {true, cuda::kMoeGroupedMaxPairs}, {false, 2047}, {true, 2047}}) {
        const std::vector<float> got = run(tok8, pairs);
        EXPECT_EQ(0, std::memcmp(base.data(), got.data(), got.size() * sizeof(float)))
            << "8 tokens a pass " << tok8 << ", max pairs " << pairs << ": max abs err against the default "
            << diff(base, got).max_abs;
    }
    ASSERT_TRUE(b.gpu->force_variant("moe", ""));
}

// mHC: norm and mixing in double on both sides; each output within ops::cases::kMhcCuda, on f32 and on bf16
// streams (the native precision's; post's bf16 output within kMhcPostBf16Cuda).
TEST(CudaMhc, PrePostHead) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    for (const DType sd : {DType::kF32, DType::kBF16})
        for (const ops::cases::MhcCase& c :
             ops::cases::mhc_cases(ops::cases::kCudaTest)) {  // eps 1e-6, 20 iters
            const int64_t M = (2 + c.hc) * c.hc;
            Pair st(sd, {c.n, c.hc, c.D}), fn(DType::kF32, {M, c.hc * c.D}), base(DType::kF32, {M});
            Pair scale(DType::kF32, {3}), x(DType::kF32, {c.n, c.D}), post(DType::kF32, {c.n, c.hc});
            Pair comb(DType::kF32, {c.n, c.hc, c.hc}), sub(DType::kF32, {c.n, c.D}),
                out(sd, {c.n, c.hc, c.D});
            Pair hfn(DType::kF32, {c.hc, c.hc * c.D}), hbase(DType::kF32, {c.hc}), hscale(DType::kF32, {1});
            fill_uniform(st), fill_uniform(fn, -0.05f, 0.05f), fill_uniform(base),
                fill_uniform(scale, 0.5f, 2.0f);
            fill_uniform(sub), fill_uniform(hfn, -0.05f, 0.05f), fill_uniform(hbase),
                fill_uniform(hscale, 0.5f, 2.0f);
            out.poison();
            Pair rx(DType::kF32, {c.n, c.D}), rpost(DType::kF32, {c.n, c.hc}),
                rcomb(DType::kF32, {c.n, c.hc, c.hc});
            b.ref->mhc_pre(
                {st.hv(), fn.hv(), base.hv(), scale.hv(), rx.hv(), rpost.hv(), rcomb.hv(), 1e-6f, 1e-6f, 20});
            const bool split_applies = c.hc * c.D % 4 == 0;  // split_k reads float4s
            for (const char* variant : {"split_k", "per_mix"}) {
                if (!split_applies && std::string(variant) == "split_k") continue;
                x.poison(), post.poison(), comb.poison();
                std::memcpy(x.hv().data, rx.hv().data,
                            x.hv().nbytes());  // the reference's values, compared below
                std::memcpy(post.hv().data, rpost.hv().data, post.hv().nbytes());
                std::memcpy(comb.hv().data, rcomb.hv().data, comb.hv().nbytes());
                ASSERT_TRUE(b.gpu->force_variant("mhc_pre", variant));
                b.gpu->mhc_pre({st.dv(), fn.dv(), base.dv(), scale.dv(), x.dv(), post.dv(), comb.dv(), 1e-6f,
                                1e-6f, 20});
                const std::string tag = std::string(variant) + " n " + std::to_string(c.n) + " hc " +
                                        std::to_string(c.hc) + " " + std::string(dtype_name(sd));
                const double tol = ops::cases::kMhcCuda.value;
                expect_close(x, tol, "mhc_pre.x " + tag), expect_close(post, tol, "mhc_pre.post " + tag);
                expect_close(comb, tol, "mhc_pre.comb " + tag);
            }
            ASSERT_TRUE(b.gpu->force_variant("mhc_pre", ""));
            // mhc_post on the same (ref-computed) post/comb for both sides
            std::memcpy(post.hv().data, rpost.hv().data, post.hv().nbytes());
            std::memcpy(comb.hv().data, rcomb.hv().data, comb.hv().nbytes());
            post.upload(), comb.upload();
            b.ref->mhc_post({st.hv(), sub.hv(), post.hv(), comb.hv(), out.hv()});
            b.gpu->mhc_post({st.dv(), sub.dv(), post.dv(), comb.dv(), out.dv()});
            expect_close(out,
                         sd == DType::kF32 ? ops::cases::kMhcCuda.value : ops::cases::kMhcPostBf16Cuda.value,
                         "mhc_post " + std::string(dtype_name(sd)));
            for (const char* variant : {"split_k", "per_mix"}) {
                if (!split_applies && std::string(variant) == "split_k") continue;
                x.poison();
                ASSERT_TRUE(b.gpu->force_variant("hc_head", variant));
                b.ref->hc_head({st.hv(), hfn.hv(), hbase.hv(), hscale.hv(), x.hv(), 1e-6f, 1e-6f});
                b.gpu->hc_head({st.dv(), hfn.dv(), hbase.dv(), hscale.dv(), x.dv(), 1e-6f, 1e-6f});
                expect_close(x, ops::cases::kMhcCuda.value,
                             std::string("hc_head ") + variant + " " + std::string(dtype_name(sd)));
            }
            ASSERT_TRUE(b.gpu->force_variant("hc_head", ""));
        }
}

}  // namespace
}  // namespace di::gputest
