// attention on cpu vs ref: decode over a full ring, prefill chunks longer than the window (chunk keys only),
// a partly filled ring, HCA (causal compressed entries), CSA picks with -1 and repeated ids, 1 head, odd
// head_dim, a V4-Flash decode shape (64 heads x 512, window 128, 512 picks); and chunking invariance.
// Bound per element (derived): scores differ by at most dz = float_sum_tol(hd) * zmax, zmax = scale |q|_2
// max|k|_2 (Cauchy-Schwarz bounds sum|q_c k_c|); each exp argument by 2 dz plus its rounding, so softmax
// weights by a relative 2.2 (that + u) + (2 n_keys + 8) u (exp, float denominator, key sum), all relative to
// max_j |k_j[c]| (the weights sum to <= 1).
#include <cstring>
#include <random>

#include "cpu_test_util.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/op_cases.h"

namespace di::cputest {
namespace {

using ops::CompMask;

using AttnCase = ops::cases::AttentionCase;
// The cpu cases of the attention table (ops/op_cases.h; its bound is kAttentionCpu, derived here).
const std::vector<AttnCase> kCases = ops::cases::attention_cases(ops::cases::kCpuTest);

struct AttnTensors {
    Tensor q, ring, kv, comp, picks, sinks;
    ops::AttentionArgs args(const AttnCase& c, const Tensor& out) const {
        ops::AttentionArgs a;
        a.q = q, a.ring = ring, a.kv = kv, a.sinks = sinks, a.out = out;
        if (c.mask != CompMask::kNone) a.comp = comp;
        if (c.mask == CompMask::kPicks) a.picks = picks;
        a.pos0 = c.pos0, a.n_cached = c.n_cached, a.window = c.window, a.comp_mask = c.mask, a.rate = c.rate;
        a.scale = 1.0f / std::sqrt(float(c.hd));
        return a;
    }
};

AttnTensors make_inputs(const AttnCase& c) {
    AttnTensors t;
    t.q = Tensor(host_allocator(), DType::kF32, {c.L, c.H, c.hd});
    t.ring = Tensor(host_allocator(), DType::kF32, {c.window - 1, c.hd});
    t.kv = Tensor(host_allocator(), DType::kF32, {c.L, c.hd});
    t.sinks = Tensor(host_allocator(), DType::kF32, {c.H});
    fill_uniform(t.q, -2.0f, 2.0f);  // scores of a few units: a peaked softmax, as in a trained model
    fill_uniform(t.ring);
    fill_uniform(t.kv);
    fill_uniform(t.sinks, -1.0f, 3.0f);
    if (c.mask != CompMask::kNone) {
        t.comp = Tensor(host_allocator(), DType::kF32, {c.T, c.hd});
        fill_uniform(t.comp);
    }
    if (c.mask == CompMask::kPicks) {
        t.picks = Tensor(host_allocator(), DType::kI32, {c.L, c.n_picks});
        for (int64_t i = 0; i < c.L * c.n_picks; ++i) {
            const uint32_t r = rng()();
            t.picks.view().ptr<int32_t>()[i] =
                r % 8 == 0 ? -1 : int32_t(r % uint32_t(c.T));  // -1s and repeats
        }
    }
    return t;
}

class CpuAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CpuAttention, MatchesRefWithinDerivedBound) {
    const AttnCase& c = GetParam();
    const AttnTensors in = make_inputs(c);
    Tensor out_ref(host_allocator(), DType::kF32, {c.L, c.H, c.hd}),
        out_cpu(host_allocator(), DType::kF32, {c.L, c.H, c.hd});
    poison(out_ref);
    poison(out_cpu);
    backends().ref->attention(in.args(c, out_ref));
    backends().cpu->attention(in.args(c, out_cpu));

    // Over all keys that could be visible (a superset gives a valid bound): max |k|_2 and max |k[c]|.
    std::vector<const float*> rows;
    for (const Tensor* t : {&in.ring, &in.kv, &in.comp})
        if (!t->empty())
            for (int64_t r = 0; r < t->view().shape[0]; ++r)
                rows.push_back(t->view().ptr<float>() + r * c.hd);
    double kmax2 = 0;
    std::vector<double> kmax_c(size_t(c.hd), 0.0);
    for (const float* r : rows) {
        double n2 = 0;
        for (int64_t d = 0; d < c.hd; ++d)
            n2 += double(r[d]) * r[d],
                kmax_c[size_t(d)] = std::max(kmax_c[size_t(d)], std::fabs(double(r[d])));
        kmax2 = std::max(kmax2, std::sqrt(n2));
    }
    const double u = 0x1p-24, nk = double(c.window + c.T);
    std::vector<float> want = to_vector(out_ref), got = to_vector(out_cpu);
    std::vector<double> bound;
    for (int64_t t = 0; t < c.L; ++t)
        for (int64_t h = 0; h < c.H; ++h) {
            double q2 = 0;
            for (int64_t d = 0; d < c.hd; ++d)
                q2 += double(in.q.view().at<float>(t, h)[d]) * in.q.view().at<float>(t, h)[d];
            // |z| <= scale |q| max|k|; exp's argument z - m also carries its rounding, <= u (2 |z|max +
            // |sink|).
            const double zmax = (1.0 / std::sqrt(double(c.hd))) * std::sqrt(q2) * kmax2;
            const double dz = float_sum_tol(c.hd) * zmax + 2 * u * zmax;
            const double darg = 2 * dz + u * (2 * zmax + std::fabs(in.sinks.view().ptr<float>()[h]) + 1);
            const double rel = 2.2 * (darg + u) + (2 * nk + 8) * u;
            for (int64_t d = 0; d < c.hd; ++d) bound.push_back(1.05 * rel * kmax_c[size_t(d)]);
        }
    expect_within(want, got, bound, c.name);
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuAttention, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<AttnCase>& i) {
                             return std::string(i.param.name);
                         });

// Attention runs a query's heads in groups over its keys; each head's scores and weighted sum must be those
// of the head alone, bit for bit: dot_tile's rows against dot_tile of one row, weighted_rows_sum's rows
// against weighted_row_sum (odd lengths for the tails).
TEST(CpuAttentionKernels, HeadGroupsEqualOneHeadAlone) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (const int64_t len : {int64_t(5), int64_t(37), int64_t(512)}) {
        const int64_t n = 19;
        std::vector<float> keys(size_t(n * len)), p(size_t(ops::cpu::kMaxSumHeads * n)),
            q(size_t(ops::cpu::kMaxSumHeads * len));
        for (float& v : keys) v = u(rng);
        for (float& v : p) v = std::fabs(u(rng)) * (v > 1.9f ? 1e-30f : 1.0f);
        for (float& v : q) v = u(rng);
        std::vector<const float*> rows;
        for (int64_t j = 0; j < n; ++j) rows.push_back(keys.data() + j * len);
        for (int nh = 1; nh <= ops::cpu::kMaxSumHeads; ++nh) {
            std::vector<float> group(size_t(nh * len)), alone(static_cast<size_t>(len));
            ops::cpu::weighted_rows_sum(rows.data(), p.data(), n, nh, n, len, group.data(), len);
            const float* qs[ops::cpu::kMaxSumHeads];
            for (int r = 0; r < nh; ++r) qs[r] = q.data() + r * len;
            float res[ops::cpu::kMaxSumHeads * ops::cpu::kTileRows], one[ops::cpu::kTileRows];
            ops::cpu::dot_tile(qs, nh, rows.data(), len, res);
            for (int r = 0; r < nh; ++r) {
                ops::cpu::weighted_row_sum(rows.data(), p.data() + r * n, n, len, alone.data());
                EXPECT_EQ(0, std::memcmp(group.data() + r * len, alone.data(), size_t(len) * 4))
                    << "weighted sum, len " << len << ", head " << r << " of " << nh;
                ops::cpu::dot_tile(qs + r, 1, rows.data(), len, one);
                EXPECT_EQ(0, std::memcmp(res + r * ops::cpu::kTileRows, one, sizeof one))
                    << "dots, len " << len << ", head " << r << " of " << nh;
            }
        }
    }
}

// A 10-token prefill in one call equals 10 one-token calls over the ring (window_store between), bit for bit:
// a query's keys and their order do not depend on how the sequence was chunked.
TEST(CpuAttentionInvariance, ChunkedEqualsWhole) {
    const AttnCase c{"whole", 10, 3, 24, 4, 0, 0};
    const AttnTensors in = make_inputs(c);
    Tensor whole(host_allocator(), DType::kF32, {c.L, c.H, c.hd});
    backends().cpu->attention(in.args(c, whole));
    Tensor ring = Tensor::zeros_host(DType::kF32, {c.window - 1, c.hd});
    for (int64_t t = 0; t < c.L; ++t) {
        ops::AttentionArgs a = in.args(c, whole);
        Tensor one(host_allocator(), DType::kF32, {1, c.H, c.hd});
        a.q = in.q.view().rows(t, 1), a.kv = in.kv.view().rows(t, 1), a.ring = ring, a.out = one;
        a.pos0 = t, a.n_cached = std::min<int64_t>(t, c.window - 1);
        backends().cpu->attention(a);
        EXPECT_EQ(std::memcmp(one.view().data, whole.view().rows(t, 1).data, size_t(c.H * c.hd) * 4), 0)
            << "token " << t;
        backends().cpu->window_store({in.kv.view().rows(t, 1), ring, t});
    }
}

}  // namespace
}  // namespace di::cputest
