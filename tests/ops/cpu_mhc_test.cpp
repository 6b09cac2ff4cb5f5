// mhc_pre and hc_head on cpu vs ref, within the case table's kMhcCpu (ops/op_cases_rows.h): ref's double
// arithmetic with the two long double sums in another order, so each float output may round the other way
// (2 ulp, 2^-22 |ref|), and x and the head output also by 2^-22 x 1.1 sum_i |stream_i[c]| (a 1-ulp change
// of pre_i <= 1 + hc_eps). Every test runs f32 streams and bf16 streams (the native precision's).
#include <cstring>

#include "cpu_test_util.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/op_cases.h"
#include "ops/op_cases_rows.h"

namespace di::cputest {
namespace {

using ops::cases::MhcCase;
// The cpu cases of the mHC table (ops/op_cases.h).
const std::vector<MhcCase> kCases = ops::cases::mhc_cases(ops::cases::kCpuTest);

struct MhcInputs {
    Tensor streams, fn, base, scale, fn_head, base_head, scale_head;
};

// The streams in dtype `dt` (bf16: the f32 draws rounded by ref's cast).
Tensor streams_as(Tensor f32, DType dt) {
    if (dt == DType::kF32) return f32;
    const TensorView v = f32.view();
    Tensor out(host_allocator(), dt, {v.shape[0], v.shape[1], v.shape[2]});
    const int64_t rows = v.shape[0] * v.shape[1];
    backends().ref->cast({.x = v.reshape({rows, v.shape[2]}), .out = out.view().reshape({rows, v.shape[2]})});
    return out;
}

MhcInputs make_inputs(const MhcCase& c, DType streams_dt = DType::kF32) {
    MhcInputs in;
    const int64_t m = (2 + c.hc) * c.hc, width = c.hc * c.D;
    in.streams = Tensor(host_allocator(), DType::kF32, {c.n, c.hc, c.D});
    in.fn = Tensor(host_allocator(), DType::kF32, {m, width});
    in.base = Tensor(host_allocator(), DType::kF32, {m});
    in.scale = Tensor(host_allocator(), DType::kF32, {3});
    in.fn_head = Tensor(host_allocator(), DType::kF32, {c.hc, width});
    in.base_head = Tensor(host_allocator(), DType::kF32, {c.hc});
    in.scale_head = Tensor(host_allocator(), DType::kF32, {1});
    fill_uniform(in.streams, -3.0f, 3.0f);
    const float a = 1.0f / std::sqrt(float(width));  // mix entries of order 1
    fill_uniform(in.fn, -a, a);
    fill_uniform(in.fn_head, -a, a);
    fill_uniform(in.base, -1.0f, 1.0f);
    fill_uniform(in.base_head, -1.0f, 1.0f);
    fill_uniform(in.scale, 0.5f, 2.0f);
    fill_uniform(in.scale_head, 0.5f, 2.0f);
    in.streams = streams_as(std::move(in.streams), streams_dt);
    return in;
}

// |ref| * 2^-22 per element, plus 2^-22 * 1.1 * sum_i |stream_i[c]| when `collapse`.
std::vector<double> ulp_bound(const std::vector<float>& ref, const MhcCase& c, const Tensor* streams) {
    std::vector<double> b(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
        b[i] = 0x1p-22 * std::fabs(ref[i]);
        if (streams) {
            const int64_t t = int64_t(i) / c.D, col = int64_t(i) % c.D;
            for (int64_t s = 0; s < c.hc; ++s)
                b[i] += 0x1p-22 * 1.1 *
                        std::fabs(load_float(streams->view().data, streams->view().dtype,
                                             (t * c.hc + s) * c.D + col));
        }
    }
    return b;
}

class CpuMhc : public ::testing::TestWithParam<MhcCase> {};

constexpr DType kStreamTypes[] = {DType::kF32, DType::kBF16};

TEST_P(CpuMhc, PreMatchesRefWithinTwoUlp) {
    for (const DType sd : kStreamTypes) {
        const MhcCase& c = GetParam();
        const MhcInputs in = make_inputs(c, sd);
        struct Out {
            Tensor x, post, comb;
        };
        auto run = [&](ops::Backend& be) {
            Out o{Tensor(host_allocator(), DType::kF32, {c.n, c.D}),
                  Tensor(host_allocator(), DType::kF32, {c.n, c.hc}),
                  Tensor(host_allocator(), DType::kF32, {c.n, c.hc, c.hc})};
            poison(o.x), poison(o.post), poison(o.comb);
            be.mhc_pre({in.streams, in.fn, in.base, in.scale, o.x, o.post, o.comb, 1e-6f, c.hc_eps, c.iters});
            return o;
        };
        const Out r = run(*backends().ref), p = run(*backends().cpu);
        const std::vector<float> rx = to_vector(r.x), rp = to_vector(r.post), rc = to_vector(r.comb);
        expect_within(rx, to_vector(p.x), ulp_bound(rx, c, &in.streams), std::string(c.name) + ".x");
        expect_within(rp, to_vector(p.post), ulp_bound(rp, c, nullptr), std::string(c.name) + ".post");
        expect_within(rc, to_vector(p.comb), ulp_bound(rc, c, nullptr), std::string(c.name) + ".comb");
    }
}

TEST_P(CpuMhc, HeadMatchesRefWithinTwoUlp) {
    for (const DType sd : kStreamTypes) {
        const MhcCase& c = GetParam();
        const MhcInputs in = make_inputs(c, sd);
        auto run = [&](ops::Backend& be) {
            Tensor out(host_allocator(), DType::kF32, {c.n, c.D});
            poison(out);
            be.hc_head({in.streams, in.fn_head, in.base_head, in.scale_head, out, 1e-6f, c.hc_eps});
            return to_vector(out);
        };
        const std::vector<float> r = run(*backends().ref);
        expect_within(r, run(*backends().cpu), ulp_bound(r, c, &in.streams), std::string(c.name) + ".head");
    }
}

// post: ref's expression per element in ref's order, so the same bits, on one and two threads.
TEST_P(CpuMhc, PostEqualsRef) {
    for (const DType sd : kStreamTypes) {
        const MhcCase& c = GetParam();
        const MhcInputs in = make_inputs(c, sd);
        Tensor sub(host_allocator(), DType::kF32, {c.n, c.D}),
            post(host_allocator(), DType::kF32, {c.n, c.hc}),
            comb(host_allocator(), DType::kF32, {c.n, c.hc, c.hc});
        fill_uniform(sub, -2.0f, 2.0f);
        fill_uniform(post, 0.0f, 2.0f);
        fill_uniform(comb, 0.0f, 1.0f);
        auto run = [&](ops::Backend& be) {
            Tensor out(host_allocator(), sd, {c.n, c.hc, c.D});
            poison(out);
            be.mhc_post({in.streams, sub, post, comb, out});
            return to_vector(out);
        };
        const std::vector<float> r = run(*backends().ref);
        EXPECT_EQ(r, run(*backends().cpu)) << c.name << " " << dtype_name(sd);
        ops::CpuBackend one(1);
        EXPECT_EQ(r, run(one)) << c.name << " " << dtype_name(sd) << ", one thread";
        EXPECT_EQ(backends().cpu->dispatch_count("mhc_post", ops::kCpuSimd) > 0, true);
    }
}

// bf16 streams against the reference itself: pre, head and post read them as the f32 values they hold (the
// same outputs as f32 streams of those values), and post's bf16 output is its f32 output rounded to nearest
// even (core/dtype.h's rounding, not the op's).
TEST_P(CpuMhc, Bf16StreamsAreTheirValuesAndPostRoundsItsF32Sums) {
    const MhcCase& c = GetParam();
    const MhcInputs in = make_inputs(c, DType::kBF16);
    Tensor held(host_allocator(), DType::kF32, {c.n, c.hc, c.D});  // the bf16 streams' values in f32
    const std::vector<float> values = to_vector(in.streams);
    std::memcpy(held.view().data, values.data(), values.size() * sizeof(float));
    ops::Backend& ref = *backends().ref;
    auto pre = [&](const Tensor& streams) {
        Tensor x(host_allocator(), DType::kF32, {c.n, c.D}), post(host_allocator(), DType::kF32, {c.n, c.hc}),
            comb(host_allocator(), DType::kF32, {c.n, c.hc, c.hc});
        ref.mhc_pre({streams, in.fn, in.base, in.scale, x, post, comb, 1e-6f, c.hc_eps, c.iters});
        Tensor head(host_allocator(), DType::kF32, {c.n, c.D});
        ref.hc_head({streams, in.fn_head, in.base_head, in.scale_head, head, 1e-6f, c.hc_eps});
        return std::vector<std::vector<float>>{to_vector(x), to_vector(post), to_vector(comb),
                                               to_vector(head)};
    };
    EXPECT_EQ(pre(in.streams), pre(held)) << c.name;
    Tensor sub(host_allocator(), DType::kF32, {c.n, c.D}), post(host_allocator(), DType::kF32, {c.n, c.hc}),
        comb(host_allocator(), DType::kF32, {c.n, c.hc, c.hc});
    fill_uniform(sub, -2.0f, 2.0f);
    fill_uniform(post, 0.0f, 2.0f);
    fill_uniform(comb, 0.0f, 1.0f);
    Tensor out16(host_allocator(), DType::kBF16, {c.n, c.hc, c.D}),
        out32(host_allocator(), DType::kF32, {c.n, c.hc, c.D});
    ref.mhc_post({in.streams, sub, post, comb, out16});
    ref.mhc_post({held, sub, post, comb, out32});
    const std::vector<float> f32 = to_vector(out32);
    std::vector<float> rounded(f32.size());
    for (size_t i = 0; i < f32.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(f32[i]));
    EXPECT_EQ(to_vector(out16), rounded) << c.name;
    EXPECT_NE(to_vector(out16), f32) << c.name << ": bf16 out kept f32 values";
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuMhc, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<MhcCase>& i) {
                             return std::string(i.param.name);
                         });

// mHC's mix takes its double dot products four rows at a time: each row's sum must be that of the row alone,
// bit for bit (odd lengths for the tails; 6 rows: one block of four and two alone).
TEST(CpuMhcKernels, DotRowsInBlocksEqualEachRowAlone) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    for (const int64_t len : {int64_t(3), int64_t(29), int64_t(4096)}) {
        const int64_t n = 6;
        std::vector<float> a(static_cast<size_t>(len)), m(static_cast<size_t>(n * len));
        for (float& v : a) v = u(rng);
        for (float& v : m) v = u(rng);
        std::vector<const float*> rows;
        for (int64_t r = 0; r < n; ++r) rows.push_back(m.data() + r * len);
        double all[6], one = 0;
        ops::cpu::dot_rows_f64(a.data(), rows.data(), n, len, all);
        for (int64_t r = 0; r < n; ++r) {
            ops::cpu::dot_rows_f64(a.data(), rows.data() + r, 1, len, &one);
            EXPECT_EQ(0, std::memcmp(&one, all + r, sizeof one)) << "len " << len << ", row " << r;
        }
    }
}

}  // namespace
}  // namespace di::cputest
