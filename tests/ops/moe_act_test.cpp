// moe with quantised activations (MoeArgs::act, the native precision: DeepSeek's FP8 x FP4 expert GEMMs):
// ref against the same steps composed here from ref's linear and the quantiser of ops/act_quant.h (x and the
// SwiGLU output quantised, nothing else), and cpu against ref.
#include <cmath>
#include <numeric>

#include "cpu_test_util.h"
#include "ops/act_quant.h"
#include "ops/cpu/cpu_kernels.h"

namespace di::cputest {
namespace {

using ops::ActQuant;
using ops::WeightFormat;

double rel_l2(const std::vector<float>& want, const std::vector<float>& got) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double d = double(got[i]) - double(want[i]);
        num += d * d, den += double(want[i]) * double(want[i]);
    }
    return std::sqrt(num / den);
}

struct Moe {
    int64_t n = 6, D = 256, I = 128, E = 4, k = 2;
    float limit = 10.0f;
    std::vector<TestWeight> w;  // [E][w1, w3, w2]
    std::vector<ops::ExpertWeights> experts;
    Tensor x, ids, wts;

    explicit Moe(WeightFormat fmt, int64_t tokens = 6) : n(tokens) {
        for (int64_t e = 0; e < E; ++e) {
            w.push_back(make_weight(fmt, I, D));
            w.push_back(make_weight(fmt, I, D));
            w.push_back(make_weight(fmt, D, I));
        }
        for (int64_t e = 0; e < E; ++e)
            experts.push_back({w[size_t(3 * e)].w, w[size_t(3 * e + 1)].w, w[size_t(3 * e + 2)].w});
        x = Tensor(host_allocator(), DType::kF32, {n, D});
        ids = Tensor(host_allocator(), DType::kI32, {n, k});
        wts = Tensor(host_allocator(), DType::kF32, {n, k});
        fill_uniform(x.view(), -2.0f, 2.0f);
        fill_uniform(wts.view(), 0.05f, 1.0f);
        for (int64_t t = 0; t < n; ++t)
            for (int64_t j = 0; j < k; ++j) ids.view().ptr<int32_t>()[t * k + j] = int32_t((t + 3 * j) % E);
    }
    std::vector<float> run(ops::Backend& be, ActQuant act) {
        Tensor out(host_allocator(), DType::kF32, {n, D});
        poison(out.view());
        ops::MoeArgs a{.x = x.view(),
                       .ids = ids.view(),
                       .weights = wts.view(),
                       .experts = experts.data(),
                       .n_experts = E,
                       .out = out.view(),
                       .limit = limit,
                       .act = act};
        be.moe(a);
        return to_vector(out.view());
    }
};

// The native steps from ref's linear: per (token, slot) xq = Q(x), h = swiglu(W1 xq, W3 xq), d = W2 Q(h),
// out = sum_j w_j d_j in slot order. Tolerance 1e-4 (relative L2): the same sums as ref's moe, but a SwiGLU
// output within an ulp of an e4m3 rounding boundary could round to the other neighbour.
TEST(MoeAct, RefQuantisesTheInputAndTheSwigluOutputOnly) {
    ops::Backend& ref = *backends().ref;
    for (WeightFormat fmt : {WeightFormat::kFp4Group, WeightFormat::kFp8Block}) {
        Moe m(fmt);
        const std::vector<float> got = m.run(ref, ActQuant::kFp8Block128);
        std::vector<float> want(size_t(m.n * m.D));
        Tensor xq(host_allocator(), DType::kF32, {1, m.D}), g(host_allocator(), DType::kF32, {1, m.I}),
            u(host_allocator(), DType::kF32, {1, m.I}), d(host_allocator(), DType::kF32, {1, m.D});
        for (int64_t t = 0; t < m.n; ++t) {
            std::vector<double> acc(size_t(m.D), 0.0);
            ops::fp8_block_quant_dequant_row(m.x.view().ptr<float>() + t * m.D, m.D, xq.view().ptr<float>());
            for (int64_t j = 0; j < m.k; ++j) {
                const ops::ExpertWeights& ew = m.experts[size_t(m.ids.view().ptr<int32_t>()[t * m.k + j])];
                ref.linear({.x = xq.view(), .w = ew.w1, .y = g.view()});
                ref.linear({.x = xq.view(), .w = ew.w3, .y = u.view()});
                float* h = g.view().ptr<float>();
                for (int64_t r = 0; r < m.I; ++r) {
                    const float gc = std::min(h[r], m.limit),
                                uc = std::clamp(u.view().ptr<float>()[r], -m.limit, m.limit);
                    h[r] = float(double(gc) / (1.0 + std::exp(-double(gc))) * double(uc));
                }
                ops::fp8_block_quant_dequant_row(h, m.I, h);
                ref.linear({.x = g.view(), .w = ew.w2, .y = d.view()});
                const double wj = m.wts.view().ptr<float>()[t * m.k + j];
                for (int64_t c = 0; c < m.D; ++c) acc[size_t(c)] += double(d.view().ptr<float>()[c]) * wj;
            }
            for (int64_t c = 0; c < m.D; ++c) want[size_t(t * m.D + c)] = float(acc[size_t(c)]);
        }
        EXPECT_LE(rel_l2(want, got), 1e-4) << int(fmt);
        // and the quantisation is not a no-op: e4m3's 3 mantissa bits move the result by far more
        EXPECT_GE(rel_l2(m.run(ref, ActQuant::kNone), got), 1e-3) << int(fmt);
    }
}

// cpu against ref, relative L2 <= 1e-3: their gate/up sums (f32 against double) may put a SwiGLU output on
// different sides of an e4m3 rounding boundary, which moves that pair's row by up to 2^-4 |h_i| |W2[:, i]|
// (about 1e-3 of a row at these sizes); elsewhere the two agree to f32 rounding.
TEST(MoeAct, CpuMatchesRef) {
    for (WeightFormat fmt : {WeightFormat::kFp4Group, WeightFormat::kFp8Block}) {
        Moe m(fmt);
        const std::vector<float> want = m.run(*backends().ref, ActQuant::kFp8Block128),
                                 got = m.run(*backends().cpu, ActQuant::kFp8Block128);
        EXPECT_LE(rel_l2(want, got), 1e-3) << int(fmt);
    }
}

// A token's row is the same bits alone and inside the batch (the native fp4 kernel's passes of 1, 2 and 4
// token rows run the same instructions per row, on weight rows converted once where an expert has more than
// 4 of the batch's tokens: 12 tokens x 2 slots over 4 experts).
TEST(MoeAct, CpuTokensAloneEqualTheirRowsInTheBatch) {
    Moe m(WeightFormat::kFp4Group, 12);
    const std::vector<float> all = m.run(*backends().cpu, ActQuant::kFp8Block128);
    for (int64_t t = 0; t < m.n; ++t) {
        Tensor out(host_allocator(), DType::kF32, {1, m.D});
        ops::MoeArgs a{.x = m.x.view().rows(t, 1),
                       .ids = m.ids.view().rows(t, 1),
                       .weights = m.wts.view().rows(t, 1),
                       .experts = m.experts.data(),
                       .n_experts = m.E,
                       .out = out.view(),
                       .limit = m.limit,
                       .act = ActQuant::kFp8Block128};
        backends().cpu->moe(a);
        EXPECT_TRUE(std::equal(all.begin() + t * m.D, all.begin() + (t + 1) * m.D, out.view().ptr<float>()))
            << "token " << t;
    }
}

// Row groups (a sequence's tokens in a step): a group of amx_min_tokens tokens takes the AMX tiles where the
// machine has them, the groups of 1 and 5 the AVX-512 kernels; each group's rows are the same bits alone
// and inside the batch, in both precisions (native: quantised rows; exact: f32 rows in three planes), and
// the batch stays within cpu's tolerance of ref (native 1e-3 relative L2, as above; exact 1e-6).
TEST(MoeAct, CpuRowGroupsAloneEqualTheirRowsInTheBatch) {
    for (ActQuant act : {ActQuant::kFp8Block128, ActQuant::kNone}) {
        const int64_t big = ops::cpu::amx_min_tokens(act == ActQuant::kNone ? 3 : 1);
        const std::vector<int64_t> groups = {1, big, 5};
        for (WeightFormat fmt : {WeightFormat::kFp4Group, WeightFormat::kFp8Block}) {
            SCOPED_TRACE(testing::Message() << int(fmt) << " act " << int(act));
            Moe m(fmt, big + 6);
            auto run = [&](int64_t t0, int64_t rows, std::span<const int64_t> g) {
                Tensor out(host_allocator(), DType::kF32, {rows, m.D});
                ops::MoeArgs a{.x = m.x.view().rows(t0, rows),
                               .ids = m.ids.view().rows(t0, rows),
                               .weights = m.wts.view().rows(t0, rows),
                               .experts = m.experts.data(),
                               .n_experts = m.E,
                               .out = out.view(),
                               .limit = m.limit,
                               .act = act,
                               .row_groups = g};
                backends().cpu->moe(a);
                return to_vector(out.view());
            };
            const std::vector<float> all = run(0, m.n, groups);
            EXPECT_LE(rel_l2(m.run(*backends().ref, act), all), act == ActQuant::kNone ? 1e-6 : 1e-3);
            int64_t t0 = 0;
            for (int64_t g : groups) {
                const std::vector<float> alone = run(t0, g, {});
                EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + t0 * m.D))
                    << "group at " << t0;
                t0 += g;
            }
        }
    }
}

// The native fp4 kernel (AVX-512 BF16 machines) against ref's linear on the same quantised rows: within the
// sum bound of every cpu linear (float_sum_tol(in) sum |x w|), at 1, 2, 3, 5 and 9 token rows (its 1-, 2- and
// 4-row passes; from 5 rows on weight rows converted once), a partial tile, short and V4-Flash-long rows.
TEST(NativeFp4Tile, EqualsRefLinearOnQuantisedRows) {
    for (auto [nx, in] : {std::pair<int64_t, int64_t>{1, 4096}, {2, 2048}, {3, 128}, {5, 256}, {9, 4096}}) {
        SCOPED_TRACE(testing::Message() << "rows " << nx << " in " << in);
        TestWeight tw = make_weight(WeightFormat::kFp4Group, 7, in);
        if (!ops::cpu::native_fp4_supported(tw.w)) GTEST_SKIP() << "no AVX-512 BF16 + VBMI here";
        Tensor x(host_allocator(), DType::kF32, {nx, in}), want(host_allocator(), DType::kF32, {nx, 7});
        fill_uniform(x.view(), -2.0f, 2.0f);
        std::vector<uint16_t> xbf(size_t(nx * in));
        std::vector<const uint16_t*> rows;
        for (int64_t r = 0; r < nx; ++r) {
            float* xr = x.view().ptr<float>() + r * in;
            ops::fp8_block_quant_dequant_row(xr, in, xr);
            ops::cpu::native_fp4_prepare_x(xr, in, xbf.data() + r * in);
            rows.push_back(xbf.data() + r * in);
        }
        backends().ref->linear({.x = x.view(), .w = tw.w, .y = want.view()});
        std::vector<float> want_v, got_v;
        std::vector<double> bound;
        for (int64_t o0 = 0; o0 < 7; o0 += ops::cpu::kTileRows) {
            const int64_t nw = std::min<int64_t>(ops::cpu::kTileRows, 7 - o0);
            std::vector<float> res(size_t(nx * ops::cpu::kTileRows));
            ops::cpu::native_fp4_tile(tw.w, o0, nw, rows.data(), nx, res.data());
            for (int64_t r = 0; r < nx; ++r)
                for (int64_t k = 0; k < nw; ++k) {
                    double abs_sum = 0;
                    for (int64_t i = 0; i < in; ++i)
                        abs_sum += std::fabs(double(x.view().ptr<float>()[r * in + i]) * tw.w.at(o0 + k, i));
                    want_v.push_back(want.view().ptr<float>()[r * 7 + o0 + k]);
                    got_v.push_back(res[size_t(r * ops::cpu::kTileRows + k)]);
                    bound.push_back(float_sum_tol(in) * abs_sum);
                }
        }
        expect_within(want_v, got_v, bound, "native fp4 tile");
    }
}

}  // namespace
}  // namespace di::cputest
