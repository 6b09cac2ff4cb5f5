// moe on cpu vs ref on the cpu cases of the moe table (ops/op_cases.h, tolerance kMoeCpu): the demo model's
// shape, a V4-Flash expert shape (FP4 2048 x 4096) with few tokens, many tokens over few experts, clamped and
// unclamped SwiGLU, strided rows, a repeated expert, an empty batch. Bound per element, derived in double
// here from the case's own magnitudes (see moe_bound): the float summation error of gate/up
// (float_sum_tol(hidden) * sum|x w|) carried through SwiGLU (|silu'| <= 1.1), the flush of SwiGLU outputs
// below FLT_MIN (2^-126 each), plus the float error of the down projection and of the slot-order combine. The
// V4-Flash case's random gates reach -200, so its h has subnormals.
#include <algorithm>
#include <numeric>

#include "cpu_test_util.h"
#include "ops/op_cases.h"

namespace di::cputest {
namespace {

using ops::WeightFormat;

using ops::cases::MoeCase;
// The cpu cases of the moe table (ops/op_cases.h).
const std::vector<MoeCase> kCases = ops::cases::moe_cases(ops::cases::kCpuTest);

double silu(double g) { return g / (1.0 + std::exp(-g)); }

// Error bound of the cpu result for token t (see the file comment); u = 2^-24, 5% headroom.
std::vector<double> moe_bound(const ops::MoeArgs& a, int64_t t) {
    const double u = 0x1p-24;
    const int64_t D = a.x.shape[1], k = a.ids.shape[1];
    const float* x = a.x.ptr<float>() + t * a.x.stride[0];
    std::vector<double> bound(static_cast<size_t>(D), 0.0), mag(static_cast<size_t>(D), 0.0);
    for (int64_t j = 0; j < k; ++j) {
        const ops::ExpertWeights& ew = a.experts[a.ids.ptr<int32_t>()[t * k + j]];
        const double wj = std::fabs(a.weights.ptr<float>()[t * k + j]);
        const int64_t I = ew.w1.out_dim;
        std::vector<double> h(static_cast<size_t>(I)), eh(static_cast<size_t>(I));
        for (int64_t r = 0; r < I; ++r) {
            double g = 0, up = 0, G = 0, U = 0;
            for (int64_t c = 0; c < D; ++c) {
                const double w1 = ew.w1.at(r, c), w3 = ew.w3.at(r, c);
                g += x[c] * w1, up += x[c] * w3, G += std::fabs(x[c] * w1), U += std::fabs(x[c] * w3);
            }
            const double eg = float_sum_tol(D) * G, eu = float_sum_tol(D) * U;
            const double gc = std::min(g, double(a.limit)),
                         uc = std::clamp(up, -double(a.limit), double(a.limit));
            h[size_t(r)] = silu(gc) * uc;
            eh[size_t(r)] =
                1.1 * (std::fabs(uc) + eu) * eg + std::fabs(silu(gc)) * eu + 2 * u * std::fabs(h[size_t(r)]);
        }
        for (int64_t c = 0; c < D; ++c) {
            double S = 0, E = 0, d = 0;
            for (int64_t r = 0; r < I; ++r) {
                const double w2 = std::fabs(ew.w2.at(c, r));
                d += h[size_t(r)] * ew.w2.at(c, r), S += std::fabs(h[size_t(r)]) * w2,
                    E += eh[size_t(r)] * w2;
                E += 0x1p-126 * w2;  // cpu flushes h below FLT_MIN to 0
            }
            const double ed = E + float_sum_tol(I) * (S + E);
            bound[size_t(c)] += wj * ed;
            mag[size_t(c)] += wj * (std::fabs(d) + ed);
        }
    }
    for (int64_t c = 0; c < D; ++c)
        bound[size_t(c)] = 1.05 * (bound[size_t(c)] + double(k + 2) * u * mag[size_t(c)]);
    return bound;
}

class CpuMoe : public ::testing::TestWithParam<MoeCase> {};

TEST_P(CpuMoe, MatchesRefWithinDerivedBound) {
    const MoeCase& c = GetParam();
    std::vector<TestWeight> w1, w2, w3;
    const int64_t sets = c.n_distinct > 0 ? c.n_distinct : c.E;
    for (int64_t i = 0; i < sets; ++i) {
        w1.push_back(make_weight(c.fmt, c.I, c.D, DType::kBF16, c.scale_dt));
        w3.push_back(make_weight(c.fmt, c.I, c.D, DType::kBF16, c.scale_dt));
        w2.push_back(make_weight(c.fmt, c.D, c.I, DType::kBF16, c.scale_dt));
    }
    std::vector<ops::ExpertWeights> experts(size_t(c.E));
    for (int64_t e = 0; e < c.E; ++e)
        experts[size_t(e)] = {w1[size_t(e % sets)].w, w3[size_t(e % sets)].w, w2[size_t(e % sets)].w};

    Tensor x(host_allocator(), DType::kF32, {c.n, c.D + c.x_pad});
    Tensor ids(host_allocator(), DType::kI32, {c.n, c.k}), wts(host_allocator(), DType::kF32, {c.n, c.k});
    Tensor out_ref(host_allocator(), DType::kF32, {c.n, c.D + c.x_pad}),
        out_cpu(host_allocator(), DType::kF32, {c.n, c.D + c.x_pad});
    fill_uniform(x);
    fill_uniform(wts, 0.05f, 1.0f);
    poison(out_ref);
    poison(out_cpu);
    std::vector<int32_t> perm(size_t(c.E));
    for (int64_t t = 0; t < c.n; ++t) {
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng());
        for (int64_t j = 0; j < c.k; ++j)
            ids.view().ptr<int32_t>()[t * c.k + j] = (c.repeat_expert && t == 0) ? perm[0] : perm[size_t(j)];
    }
    if (c.n >= 2)
        ids.view().ptr<int32_t>()[c.k] = ids.view().ptr<int32_t>()[0];  // two tokens share an expert

    auto args = [&](const Tensor& out) {
        ops::MoeArgs a;
        a.x = x.view();
        a.x.shape[1] = c.D;
        a.out = out.view();
        a.out.shape[1] = c.D;
        a.ids = ids;
        a.weights = wts;
        a.experts = experts.data();
        a.n_experts = c.E;
        a.limit = c.limit;
        return a;
    };
    backends().ref->moe(args(out_ref));
    backends().cpu->moe(args(out_cpu));

    std::vector<float> want, got;
    std::vector<double> bound;
    for (int64_t t = 0; t < c.n; ++t) {
        const std::vector<double> b = moe_bound(args(out_ref), t);
        for (int64_t d = 0; d < c.D; ++d) {
            want.push_back(out_ref.view().ptr<float>()[t * (c.D + c.x_pad) + d]);
            got.push_back(out_cpu.view().ptr<float>()[t * (c.D + c.x_pad) + d]);
            bound.push_back(b[size_t(d)]);
        }
        for (int64_t d = c.D; d < c.D + c.x_pad; ++d)
            ASSERT_TRUE(std::isnan(out_cpu.view().ptr<float>()[t * (c.D + c.x_pad) + d]))
                << "wrote out pad " << d;
    }
    expect_within(want, got, bound, c.name);
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuMoe, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<MoeCase>& i) {
                             return std::string(i.param.name);
                         });

}  // namespace
}  // namespace di::cputest
