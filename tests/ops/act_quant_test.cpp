// The native precision's activation quantisation (ops/act_quant.h) against independent references: e4m3
// rounding against a brute-force search over every e4m3 code (nearest, ties to the even code, saturating),
// block scales against exp2(ceil(log2(.))) in double, and linear with fp8 activation blocks (ref and cpu)
// against a plain linear on inputs this test quantised itself.
#include "ops/act_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "cpu_test_util.h"
#include "ops/cpu/cpu_kernels.h"

namespace di::cputest {
namespace {

// The finite non-negative e4m3 values in code order (0x00 .. 0x7e).
std::vector<float> e4m3_values() {
    std::vector<float> v;
    for (int c = 0; c < 0x7f; ++c) v.push_back(fp8_e4m3_to_f32(uint8_t(c)));
    return v;
}

// Nearest e4m3 value by search; a tie goes to the even code (the one whose lowest mantissa bit is 0).
float nearest_e4m3(float x) {
    static const std::vector<float> codes = e4m3_values();
    const double a = std::min(std::fabs(double(x)), 448.0);
    int best = 0;
    for (int c = 1; c < int(codes.size()); ++c) {
        const double d = std::fabs(codes[size_t(c)] - a), db = std::fabs(codes[size_t(best)] - a);
        if (d < db || (d == db && (c & 1) == 0)) best = c;
    }
    return float(std::copysign(double(codes[size_t(best)]), double(x)));
}

TEST(RoundToFp8E4m3, IsTheNearestCodeWithTiesToEven) {
    const std::vector<float> codes = e4m3_values();
    std::vector<float> probes;
    for (size_t c = 0; c + 1 < codes.size(); ++c) {  // every code, every midpoint, and next to both
        const float mid = 0.5f * (codes[c] + codes[c + 1]);
        for (float v : {codes[c], mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)})
            probes.push_back(v);
    }
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> e(-14.0f, 9.5f);
    for (int i = 0; i < 20000; ++i) probes.push_back(std::exp2(e(rng)));
    for (float v : {448.0f, 449.0f, 464.0f, 1e6f, 3e38f, 0.0f, 1e-30f}) probes.push_back(v);
    int64_t bad = 0;
    for (float p : probes)
        for (float v : {p, -p})
            if (round_to_fp8_e4m3(v) != nearest_e4m3(v) ||
                std::signbit(round_to_fp8_e4m3(v)) != std::signbit(v)) {
                if (++bad <= 5)
                    ADD_FAILURE() << "round_to_fp8_e4m3(" << v << ") = " << round_to_fp8_e4m3(v)
                                  << ", nearest code " << nearest_e4m3(v);
            }
    EXPECT_EQ(bad, 0);
    EXPECT_TRUE(std::isnan(round_to_fp8_e4m3(NAN)));
}

TEST(ActBlockScale, IsThePowerOfTwoAboveAmaxOver448) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> e(-30.0f, 30.0f);
    std::vector<float> amaxes = {0.0f, 1e-7f, 1e-4f, 448.0f, 896.0f, 448.0f * 1.5f, 1.0f, 3.0f};
    for (int i = 0; i < 5000; ++i) amaxes.push_back(std::exp2(e(rng)));
    for (float amax : amaxes) {
        const double want = std::exp2(std::ceil(std::log2(double(std::max(amax, 1e-4f) / 448.0f))));
        EXPECT_EQ(double(ops::act_block_scale(amax)), want) << "amax " << amax;
    }
}

// The quantisers divide by the block scale as a multiply by its inverse (cpu_act_quant.cpp's vectors,
// act_quant_inv in ops/cuda/device_util.cuh, which forms 1 / s from the bits: 0x7f000000 - bits, 0 for +inf).
// That is the same value only because every scale is 2^e with 2^-e a normal float, or +inf: checked here over
// the scales of every amax class and over x of every class (random bit patterns, subnormals, infinities).
TEST(ActBlockScale, DividingEqualsMultiplyingByTheInverse) {
    std::mt19937 rng(12);
    std::vector<float> scales;
    std::vector<float> amaxes = {0.0f,
                                 1e-30f,
                                 1e-4f,
                                 448.0f,
                                 std::numeric_limits<float>::max(),
                                 std::numeric_limits<float>::infinity()};
    for (int e = -149; e <= 127; ++e)
        amaxes.push_back(std::ldexp(1.0f, e)), amaxes.push_back(std::ldexp(1.5f, e));
    for (int i = 0; i < 20000; ++i) {
        const float a = std::bit_cast<float>(uint32_t(rng()) & 0x7fffffffu);  // any non-negative, NaN skipped
        if (!std::isnan(a)) amaxes.push_back(a);
    }
    for (float amax : amaxes) {
        const float sc = ops::act_block_scale(amax);
        const uint32_t u = std::bit_cast<uint32_t>(sc);
        ASSERT_TRUE((u & 0x007fffffu) == 0 &&
                    (((u >> 23) >= 127 - 22 && (u >> 23) <= 127 + 120) || u == 0x7f800000u))
            << "amax " << amax << " gives scale " << sc;
        scales.push_back(sc);
    }
    std::sort(scales.begin(), scales.end());
    scales.erase(std::unique(scales.begin(), scales.end()), scales.end());
    std::vector<float> xs = {0.0f,
                             -0.0f,
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::denorm_min(),
                             std::numeric_limits<float>::max(),
                             448.0f,
                             -448.0f};
    for (int i = 0; i < 4000; ++i) xs.push_back(std::bit_cast<float>(uint32_t(rng())));
    int64_t checked = 0;
    for (float sc : scales) {
        const uint32_t u = std::bit_cast<uint32_t>(sc);
        const float inv = std::bit_cast<float>(u == 0x7f800000u ? 0u : 0x7f000000u - u);
        ASSERT_EQ(std::bit_cast<uint32_t>(inv), std::bit_cast<uint32_t>(1.0f / sc)) << "scale " << sc;
        for (float x : xs) {
            const float q = x / sc, m = x * inv;
            if (std::isnan(q) || std::isnan(m))
                ASSERT_TRUE(std::isnan(q) && std::isnan(m)) << x << " / " << sc;
            else
                ASSERT_EQ(std::bit_cast<uint32_t>(q), std::bit_cast<uint32_t>(m)) << x << " / " << sc;
            ++checked;
        }
    }
    EXPECT_GT(checked, 100 * int64_t(xs.size()));  // the scales span the exponent range, not a few values
}

// x quantised the slow way: scale from double logs, values by code search.
std::vector<float> quantise_independently(const float* x, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t b = 0; b < n; b += 128) {
        double amax = 0;
        for (int64_t i = b; i < b + 128; ++i) amax = std::max(amax, std::fabs(double(x[i])));
        const double s = std::exp2(std::ceil(std::log2(std::max(amax, 1e-4) / 448.0)));
        for (int64_t i = b; i < b + 128; ++i) out[size_t(i)] = float(nearest_e4m3(float(x[i] / s)) * s);
    }
    return out;
}

TEST(Fp8BlockQuant, RowsMatchTheIndependentQuantiser) {
    const int64_t n = 6 * 128;
    std::vector<float> x(static_cast<size_t>(n));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const float block_scale[6] = {1.0f, 0.0f, 1e-6f, 3e4f, 0.02f, 1.0f};  // a zero block, one under the floor
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = u(rng) * block_scale[i / 128];
    x[5 * 128 + 7] = 448.0f;  // a block whose amax is exactly 448: scale 1
    std::vector<float> got(static_cast<size_t>(n));
    ops::fp8_block_quant_dequant_row(x.data(), n, got.data());
    const std::vector<float> want = quantise_independently(x.data(), n);
    for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[size_t(i)], want[size_t(i)]) << "element " << i << " x " << x[size_t(i)];
}

// linear with ActQuant::kFp8Block128 (ref and cpu) against a plain ref linear on independently quantised x;
// on AVX-512 BF16 machines the cpu side is the bf16 dot kernel (cpu_native_fp8.cpp), at 1, 2 and 5 rows
// (its 1-, 2- and 4-row passes), short and V4-Flash-long rows.
void check_fp8_act_linear(int64_t n, int64_t in, int64_t out) {
    SCOPED_TRACE(testing::Message() << "n " << n << " in " << in << " out " << out);
    const int64_t x_pad = 3;
    TestWeight tw = make_weight(ops::WeightFormat::kFp8Block, out, in);
    Tensor x(host_allocator(), DType::kF32, {n, in + x_pad});
    fill_uniform(x.view(), -2.0f, 2.0f);
    Tensor xq(host_allocator(), DType::kF32, {n, in});
    for (int64_t r = 0; r < n; ++r) {
        const std::vector<float> q = quantise_independently(x.view().ptr<float>() + r * (in + x_pad), in);
        std::copy(q.begin(), q.end(), xq.view().ptr<float>() + r * in);
    }
    Tensor want(host_allocator(), DType::kF32, {n, out}), got_ref(host_allocator(), DType::kF32, {n, out}),
        got_cpu(host_allocator(), DType::kF32, {n, out});
    backends().ref->linear({xq.view(), tw.w, want.view()});
    ops::LinearArgs a{x.view(), tw.w, got_ref.view(), ops::ActQuant::kFp8Block128};
    a.x.shape[1] = in;
    backends().ref->linear(a);
    a.y = got_cpu.view();
    backends().cpu->linear(a);
    const double tol = float_sum_tol(in);
    std::vector<float> w_ref, g_ref, g_cpu;
    std::vector<double> bound;
    for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < out; ++o) {
            double abs_sum = 0;
            for (int64_t i = 0; i < in; ++i)
                abs_sum += std::fabs(double(xq.view().ptr<float>()[r * in + i]) * tw.w.at(o, i));
            w_ref.push_back(want.view().ptr<float>()[r * out + o]);
            g_ref.push_back(got_ref.view().ptr<float>()[r * out + o]);
            g_cpu.push_back(got_cpu.view().ptr<float>()[r * out + o]);
            bound.push_back(tol * abs_sum);
        }
    EXPECT_EQ(w_ref, g_ref);  // the same f32 inputs in the same double sums
    expect_within(w_ref, g_cpu, bound, "cpu linear, fp8 activation blocks");
}

// The cpu backend's vector quantiser gives the scalar steps' bits on every kind of value: random magnitudes,
// e4m3 ties and subnormal codes, zeros of both signs, float subnormals, the 448 and amax-floor edges, huge
// values, infinities and NaNs (a NaN or an infinity in a block, and a block of only tiny values).
TEST(Fp8BlockQuant, CpuVectorRowsEqualTheScalarSteps) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::uniform_int_distribution<int> e(-40, 40);
    const int64_t n = 128 * 12;
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = std::ldexp(u(rng), e(rng) / 4 + (i / 128 - 6) * 6);
    // block 1: ties and subnormal codes of e4m3 at scale 1 (amax 448)
    x[128] = 448.0f, x[129] = 1.0625f, x[130] = 1.1875f, x[131] = 0x1p-9f * 1.5f, x[132] = 0x1p-10f;
    x[133] = -0.0f, x[134] = 0.0f, x[135] = 0x1p-140f, x[136] = -464.0f, x[137] = 0x1p-7f * 1.0625f;
    // block 2: only values below the amax floor; block 3: a NaN; block 4: an infinity; block 5: huge
    for (int64_t i = 256; i < 384; ++i) x[size_t(i)] = 3e-6f * u(rng);
    x[384 + 5] = std::numeric_limits<float>::quiet_NaN();
    x[512 + 7] = -std::numeric_limits<float>::infinity();
    x[640 + 1] = 3e38f, x[640 + 2] = -1e37f;
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n)), in_place = x;
    ops::fp8_block_quant_dequant_row(x.data(), n, want.data());
    ops::cpu::fp8_quant_dequant_row(x.data(), n, got.data());
    ops::cpu::fp8_quant_dequant_row(in_place.data(), n, in_place.data());
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(want[size_t(i)]), std::bit_cast<uint32_t>(got[size_t(i)]))
            << "element " << i << " (x = " << x[size_t(i)] << ")";
        ASSERT_EQ(std::bit_cast<uint32_t>(want[size_t(i)]), std::bit_cast<uint32_t>(in_place[size_t(i)]))
            << "in place, element " << i;
    }
}

TEST(LinearFp8Act, EqualsPlainLinearOnQuantisedInputs) {
    check_fp8_act_linear(5, 512, 384);
    check_fp8_act_linear(1, 4096, 260);  // a partial last tile
    check_fp8_act_linear(2, 1024, 256);
    check_fp8_act_linear(7, 8192, 128);
}

// The same with the AMX tiles turned off (DEEPINFER_CPU_AMX=0): the AVX-512 kernel's passes of many rows,
// which an AMX machine otherwise leaves to the tiles.
TEST(LinearFp8Act, EqualsPlainLinearOnQuantisedInputsWithoutAmx) {
    const bool was = ops::cpu::amx_enabled();
    ops::cpu::set_amx_enabled(false);
    check_fp8_act_linear(5, 512, 384);
    check_fp8_act_linear(7, 8192, 128);
    ops::cpu::set_amx_enabled(was);
}

// A row group's results of a native fp8 linear (a sequence's rows in a step) are the same bits alone, inside
// a batch of other groups, and on one or two threads: groups of 1 and 3 rows take the AVX-512 kernels and
// groups of 6 and 9 the AMX tiles where the machine has them (cpu::kAmxMinRows), each by its own size.
// Without groups the call is one group.
TEST(LinearFp8Act, RowGroupsAreBatchAndThreadInvariant) {
    const std::vector<int64_t> groups = {1, 6, 3, 1, 9, 1};
    const int64_t n = 21, in = 1024, out = 264;
    TestWeight tw = make_weight(ops::WeightFormat::kFp8Block, out, in);
    Tensor x(host_allocator(), DType::kF32, {n, in});
    fill_uniform(x.view(), -2.0f, 2.0f);
    auto run = [&](ops::Backend& be, int64_t r0, int64_t rows, std::span<const int64_t> g) {
        Tensor y(host_allocator(), DType::kF32, {rows, out});
        be.linear({x.view().rows(r0, rows), tw.w, y.view(), ops::ActQuant::kFp8Block128, g});
        return std::vector<float>(y.view().ptr<float>(), y.view().ptr<float>() + rows * out);
    };
    const std::vector<float> all = run(*backends().cpu, 0, n, groups);
    ops::CpuBackend one_thread(1);
    EXPECT_EQ(all, run(one_thread, 0, n, groups)) << "one thread against two";
    int64_t r0 = 0;
    for (int64_t g : groups) {
        const std::vector<float> alone = run(*backends().cpu, r0, g, {});
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + r0 * out)) << "group at row " << r0;
        r0 += g;
    }
}

TEST(Fp8E4m3Bits, InvertsEveryCode) {
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;  // NaN
        ASSERT_EQ(fp8_e4m3_bits(fp8_e4m3_to_f32(uint8_t(c))), c) << "code " << c;
    }
    EXPECT_EQ(fp8_e4m3_bits(std::numeric_limits<float>::quiet_NaN()), 0x7f);
}

// x [n, in] with blocks of very different sizes (a zero block, one under the amax floor, large ones).
Tensor varied_rows(int64_t n, int64_t in) {
    Tensor x(host_allocator(), DType::kF32, {n, in});
    fill_uniform(x.view(), -1.0f, 1.0f);
    const float scale[] = {1.0f, 0.0f, 1e-6f, 3e4f, 0.02f, 7.0f};
    for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < in; ++i) x.view().ptr<float>()[r * in + i] *= scale[(r + i / 128) % 6];
    return x;
}

// The quantiser as an op (Backend::act_quant, the host default, into block-major scales): each code times its
// block's scale is the row quantiser's dequantised value, and the scale the power of two above amax / 448.
TEST(ActQuantOp, CodesTimesScalesAreTheQuantisersValues) {
    const int64_t n = 5, in = 768;
    Tensor x = varied_rows(n, in);
    Tensor q(host_allocator(), DType::kF8E4M3, {n, in}), st(host_allocator(), DType::kF32, {in / 128, n});
    TensorView scales = st.view();
    std::swap(scales.shape[0], scales.shape[1]), std::swap(scales.stride[0], scales.stride[1]);
    backends().ref->act_quant({.x = x.view(), .q = q.view(), .scales = scales});
    std::vector<float> want(static_cast<size_t>(in));
    for (int64_t r = 0; r < n; ++r) {
        ops::fp8_block_quant_dequant_row(x.view().ptr<float>() + r * in, in, want.data());
        for (int64_t i = 0; i < in; ++i) {
            const float s = st.view().ptr<float>()[(i / 128) * n + r];
            const float got = fp8_e4m3_to_f32(q.view().ptr<uint8_t>()[r * in + i]) * s;
            ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want[size_t(i)]))
                << "row " << r << " column " << i;
        }
        for (int64_t b = 0; b < in / 128; ++b) {
            double amax = 0;
            for (int64_t i = b * 128; i < (b + 1) * 128; ++i)
                amax = std::max(amax, std::fabs(double(x.view().ptr<float>()[r * in + i])));
            const double s = std::exp2(std::ceil(std::log2(std::max(amax, 1e-4) / 448.0)));
            ASSERT_EQ(st.view().ptr<float>()[b * n + r], float(s)) << "row " << r << " block " << b;
        }
    }
}

// A linear on pre-quantised x (LinearArgs' e4m3 codes and scales, here columns of a wider quantised input,
// as wo_a's groups read the attention's) gives the bits of the same linear quantising the f32 x itself, on
// ref and cpu.
TEST(LinearFp8Act, PrequantisedInputEqualsQuantisingHere) {
    const int64_t n = 6, wide = 1024, in = 512, out = 264, c0 = 256;
    TestWeight tw = make_weight(ops::WeightFormat::kFp8Block, out, in);
    Tensor x = varied_rows(n, wide);
    Tensor q(host_allocator(), DType::kF8E4M3, {n, wide}), st(host_allocator(), DType::kF32, {wide / 128, n});
    TensorView scales = st.view();
    std::swap(scales.shape[0], scales.shape[1]), std::swap(scales.stride[0], scales.stride[1]);
    backends().ref->act_quant({.x = x.view(), .q = q.view(), .scales = scales});
    for (ops::Backend* be : {backends().ref.get(), static_cast<ops::Backend*>(backends().cpu.get())}) {
        Tensor want(host_allocator(), DType::kF32, {n, out}), got(host_allocator(), DType::kF32, {n, out});
        TensorView xs = x.view();
        xs.data = xs.ptr<float>() + c0, xs.shape[1] = in;
        be->linear({xs, tw.w, want.view(), ops::ActQuant::kFp8Block128});
        ops::LinearArgs a{q.view(), tw.w, got.view(), ops::ActQuant::kFp8Block128};
        a.x.data = q.view().ptr<uint8_t>() + c0, a.x.shape[1] = in;
        a.x_scales = scales;
        a.x_scales.data = st.view().ptr<float>() + (c0 / 128) * n, a.x_scales.shape[1] = in / 128;
        be->linear(a);
        EXPECT_EQ(0, std::memcmp(want.view().data, got.view().data, size_t(n * out) * sizeof(float)))
            << be->name();
    }
}

TEST(LinearFp8ActDeathTest, NeedsInDimAMultipleOf128) {
    TestWeight tw = make_weight(ops::WeightFormat::kFp8Block, 8, 200);
    Tensor x(host_allocator(), DType::kF32, {1, 200}), y(host_allocator(), DType::kF32, {1, 8});
    EXPECT_DEATH(ops::check(ops::LinearArgs{x.view(), tw.w, y.view(), ops::ActQuant::kFp8Block128}),
                 "multiple of 128");
}

}  // namespace
}  // namespace di::cputest
