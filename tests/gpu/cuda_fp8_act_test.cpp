// The native precision's fp8 activation blocks on CUDA: the quantisation kernels against ops/act_quant.h bit
// for bit, and linear with ActQuant::kFp8Block128 on every variant against the reference backend.
// Tolerances: the f32 kernels read the same dequantised inputs as ref, so 2e-5 as in cuda_linear_test. The
// cuBLASLt FP8 path multiplies e4m3 codes on tensor cores, whose accumulation inside each 128-wide K block
// keeps fewer bits than f32 (DeepSeek-V3 report: about 14) before the block is scaled into an f32 sum:
// 1e-3 relative L2, and its measured error is printed.
#include <cuda_runtime.h>

#include <optional>
#include <tuple>

#include "gpu_test_util.h"
#include "ops/act_quant.h"
#include "ops/cuda/fp8_gemm.h"

namespace di::gputest {
namespace {

using ops::WeightFormat;

// Rows whose 128-column blocks cover the quantiser's edge cases: a zero block, one under the amax floor,
// large values, e4m3 rounding ties (odd multiples of half a code step at scale 1), subnormal codes, NaN-free.
std::vector<float> edge_rows(int64_t n, int64_t in) {
    std::vector<float> x(static_cast<size_t>(n * in));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t r = 0; r < n; ++r)
        for (int64_t b = 0; b < in / 128; ++b) {
            float* blk = x.data() + r * in + b * 128;
            const int kind = int((r * 7 + b) % 6);
            for (int i = 0; i < 128; ++i) {
                const float v = u(rng());
                blk[i] = kind == 0 ? 0.0f : kind == 1 ? v * 1e-6f : kind == 2 ? v * 3e4f : v;
            }
            if (kind == 3) {  // amax 448 (scale 1), then values exactly halfway between e4m3 codes
                blk[0] = 448.0f;
                for (int i = 1; i < 64; ++i)
                    blk[i] = (i % 2 ? 1.0f : -1.0f) * (1.0f + (2 * (i % 8) + 1) / 16.0f);
                for (int i = 64; i < 96; ++i) blk[i] = float(i - 64) * 0x1p-10f;  // subnormal codes and ties
            }
        }
    return x;
}

// Every form of the kernels: 16-byte rows with 4, 2 and 1 blocks a warp (20, 10 and 5 blocks), and rows that
// are not (a stride of odd floats: scalar loads).
void expect_kernels_match_host(int64_t n, int64_t in, int64_t ldx) {
    Pair x(DType::kF32, {n, ldx}), deq(DType::kF32, {n, in}), q(DType::kU8, {n, in}),
        sx(DType::kF32, {in / 128, n});
    const std::vector<float> rows = edge_rows(n, in);
    for (int64_t r = 0; r < n; ++r)
        std::copy(rows.begin() + r * in, rows.begin() + (r + 1) * in, x.hv().ptr<float>() + r * ldx);
    x.upload();
    deq.poison(), q.poison(), sx.poison();
    cuda::launch_act_quant_dequant(x.dv().ptr<float>(), ldx, n, in, deq.dv().ptr<float>(), nullptr);
    cuda::launch_act_quant_fp8(x.dv().ptr<float>(), ldx, n, in, q.dv().ptr<uint8_t>(), sx.dv().ptr<float>(),
                               n, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = deq.device_f32(), scales = sx.device_f32();
    const std::vector<uint8_t> codes = q.device_as<uint8_t>();
    int64_t bad = 0;
    for (int64_t r = 0; r < n; ++r) {
        std::vector<float> want(static_cast<size_t>(in));
        ops::fp8_block_quant_dequant_row(rows.data() + r * in, in, want.data());
        for (int64_t i = 0; i < in; ++i) {
            const float s = scales[size_t((i / 128) * n + r)];
            const float from_code = fp8_e4m3_to_f32(codes[size_t(r * in + i)]) * s;
            if (std::memcmp(&got[size_t(r * in + i)], &want[size_t(i)], 4) != 0 ||
                from_code != want[size_t(i)])
                if (++bad <= 5)
                    ADD_FAILURE() << "row " << r << " col " << i << ": x " << rows[size_t(r * in + i)]
                                  << " host " << want[size_t(i)] << " dequant kernel "
                                  << got[size_t(r * in + i)] << " code*scale " << from_code;
        }
        for (int64_t b = 0; b < in / 128; ++b) {
            float amax = 0;
            for (int i = 0; i < 128; ++i)
                amax = std::max(amax, std::fabs(rows[size_t(r * in + b * 128 + i)]));
            EXPECT_EQ(scales[size_t(b * n + r)], ops::act_block_scale(amax)) << "row " << r << " block " << b;
        }
    }
    EXPECT_EQ(bad, 0) << "n " << n << " in " << in << " ldx " << ldx;
}

TEST(CudaActQuant, KernelsMatchTheHostStepsBitForBit) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    for (const auto& [n, in, ldx] : {std::tuple<int64_t, int64_t, int64_t>{7, 1280, 1284},
                                     {9, 2560, 2560},
                                     {5, 640, 644},
                                     {7, 1280, 1283},
                                     {3, 2048, 2049}}) {
        SCOPED_TRACE("n " + std::to_string(n) + " in " + std::to_string(in) + " ldx " + std::to_string(ldx));
        expect_kernels_match_host(n, in, ldx);
    }
}

struct ActCase {
    const char* name;
    int64_t n, in, out;
    DType scale_dt = DType::kE8M0;
    int64_t x_pad = 0;
    // the device reads the scales in the backend's bound form (Backend::fp8_block_scales)
    bool bound = false;
};

const ActCase kActCases[] = {
    {"decode_q_a_n1", 1, 4096, 1024},
    {"decode_o_b_n2", 2, 8192, 4096},
    {"n15_k2048", 15, 2048, 512},
    {"n16_k2048", 16, 2048, 512},
    {"q_b_n19", 19, 1024, 32768},
    {"o_a_group_strided_n33", 33, 4096, 1024, DType::kE8M0, 7 * 4096},
    {"q_a_n37", 37, 4096, 1024},
    {"f32_scale_n40", 40, 512, 384, DType::kF32},
    {"o_b_n64", 64, 8192, 4096},
    {"q_a_n256", 256, 4096, 1024},
    {"partial_out_block_n20", 20, 384, 300},  // out not a multiple of 128: cuBLASLt does not take it
    // the tiny fixture's shapes (hidden 256, one 128-row block) and token counts that are not multiples of 16
    {"tiny_n60_k256_o128", 60, 256, 128},
    {"tiny_n64_k256_o128", 64, 256, 128},
    {"tiny_n60_k512_o256", 60, 512, 256},
    {"n60_k4096_o1024", 60, 4096, 1024},
    {"n48_k4096_o1024", 48, 4096, 1024},
    {"n24_k4096_o1024", 24, 4096, 1024},
    {"n8_k4096_o1024", 8, 4096, 1024},
    {"tiny_n60_k128_o512", 60, 128, 512},
    {"tiny_n60_k256_o256", 60, 256, 256},  // the tiny fixture's wo_b
    {"tiny_n64_k256_o256", 64, 256, 256},
    {"tiny_n60_k256_o384", 60, 256, 384},
    {"tiny_n60_k256_o512", 60, 256, 512},
    {"tiny_n60_k512_o512", 60, 512, 512},
    {"tiny_n60_k384_o256", 60, 384, 256},
    {"n60_k640_o256_f32_scale", 60, 640, 256, DType::kF32},  // 5 scale blocks per row: padded to 8
    {"n60_k1024_o1024", 60, 1024, 1024},
    // fp8_mma's other splits: one block a 32-row tile (q_b's 1,024 tiles; 4 chunks over 4 warps), f32 scales
    {"q_b_n4", 4, 1024, 32768},
    {"f32_scale_n5", 5, 512, 384, DType::kF32},
    // scales as the model binds them on cuda: f32 rows of cuBLASLt's stride (640 inputs: 5 blocks, 8 a row)
    {"bound_q_a_n1", 1, 4096, 1024, DType::kE8M0, 0, true},
    {"bound_wkv_n16", 16, 4096, 512, DType::kE8M0, 0, true},
    {"bound_q_b_n16", 16, 1024, 32768, DType::kE8M0, 0, true},
    {"bound_o_b_n3", 3, 8192, 4096, DType::kE8M0, 0, true},
    {"bound_k640_n60", 60, 640, 256, DType::kE8M0, 0, true},
};

using ActRun = VariantRun<ActCase>;

bool takes(const ActCase& c, const std::string& v) {
    if (v == "cublaslt_fp8") return c.out % 128 == 0;
    if (v == "split_rows") return c.n <= 2 && (c.in == 1024 || c.in == 2048 || c.in == 4096 || c.in == 8192);
    if (v == "stream_gemv") return c.n <= 16;
    if (v == "fp8_mma") return c.n <= 16 && c.out % 32 == 0;
    return true;
}

class CudaLinearFp8Act : public ::testing::TestWithParam<ActRun> {};

TEST_P(CudaLinearFp8Act, MatchesRef) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const ActCase& c = GetParam().c;
    const std::string variant = GetParam().variant;
    if (!takes(c, variant)) GTEST_SKIP() << variant << " does not take this case";
    const char* why = nullptr;
    // default dispatch: fp8_mma from 2 to 16 rows on <= 2,048 output rows (linear_fp8mma_dispatched),
    // cuBLASLt from 16 rows on the others
    const bool mma_default = variant.empty() && c.n >= 2 && c.n <= 16 && c.out <= 2048 && c.out % 32 == 0;
    const bool lt = variant == "cublaslt_fp8" ||
                    (variant.empty() && !mma_default && c.n >= 16 && takes(c, "cublaslt_fp8"));
    if (lt) {
        cuda::LtFp8Gemm* g = cuda::LtFp8Gemm::instance(&why);
        ASSERT_NE(g, nullptr) << why;
        const char* note = "";
        ASSERT_TRUE(g->supports(c.n, c.in, c.out, c.in, c.out, nullptr, &note)) << "cuBLASLt: " << note;
        std::printf("%s: cuBLASLt plan: %s\n", c.name, note);
    }
    auto& b = backends();
    Pair x(DType::kF32, {c.n, c.in + c.x_pad}), y(DType::kF32, {c.n, c.out});
    fill_uniform(x, -3.0f, 3.0f);
    y.poison();
    Pair data(DType::kF8E4M3, {c.out, c.in}), scale(c.scale_dt, {(c.out + 127) / 128, c.in / 128});
    fill_fp8(data);
    if (c.scale_dt == DType::kE8M0)
        fill_e8m0(scale);
    else
        fill_uniform(scale, 0.01f, 0.1f);
    std::optional<ops::Backend::BoundScales> bound;
    if (c.bound) {
        bound = b.gpu->fp8_block_scales(scale.dv());
        ASSERT_TRUE(bound.has_value()) << "the cuda backend binds e8m0 scales in its own form";
        EXPECT_EQ(bound->view.dtype, DType::kF32);
        EXPECT_EQ(bound->view.stride[0], (c.in / 128 + 3) / 4 * 4);
    }
    auto make = [&](bool dev) {
        ops::LinearArgs a;
        a.x = dev ? x.dv() : x.hv();
        a.x.shape[1] = c.in;
        a.y = dev ? y.dv() : y.hv();
        a.w.format = WeightFormat::kFp8Block;
        a.w.data = dev ? data.dv() : data.hv();
        a.w.scale = dev ? (bound ? bound->view : scale.dv()) : scale.hv();
        a.w.out_dim = c.out, a.w.in_dim = c.in;
        a.act = ops::ActQuant::kFp8Block128;
        return a;
    };
    ASSERT_TRUE(b.gpu->force_variant("linear", variant)) << variant;
    const int64_t lt_before = b.gpu->dispatch_count("linear", "cublaslt_fp8"),
                  fm_before = b.gpu->dispatch_count("linear", "fp8_mma");
    b.ref->linear(make(false));
    b.gpu->linear(make(true));
    b.gpu->synchronize();
    EXPECT_EQ(b.gpu->dispatch_count("linear", "cublaslt_fp8") - lt_before, lt ? 1 : 0) << "ran on cuBLASLt";
    if (variant == "fp8_mma" || mma_default) {  // FP8 tensor cores as cuBLASLt's; a row's bits are its own
        EXPECT_EQ(b.gpu->dispatch_count("linear", "fp8_mma") - fm_before, 1) << "fp8_mma did not run";
        const Diff d = diff(y.host_f32(), y.device_f32());
        std::printf("%s: fp8_mma relative L2 error %.3g (max abs %.3g)\n", c.name, d.rel_l2, d.max_abs);
        expect_close(y, 1e-3, c.name);
        const std::vector<float> all = y.device_f32();
        b.gpu->linear(make(true));
        EXPECT_EQ(0, std::memcmp(all.data(), y.device_f32().data(), all.size() * sizeof(float)))
            << "not deterministic";
        if (mma_default) {  // one row goes to another kernel by default
            ASSERT_TRUE(b.gpu->force_variant("linear", ""));
            return;
        }
        ops::LinearArgs one = make(true);
        one.x = one.x.rows(c.n - 1, 1), one.y = one.y.rows(c.n - 1, 1);
        y.poison();
        b.gpu->linear(one);
        const std::vector<float> alone = y.device_f32();
        EXPECT_EQ(0, std::memcmp(all.data() + (c.n - 1) * c.out, alone.data() + (c.n - 1) * c.out,
                                 size_t(c.out) * sizeof(float)))
            << c.name << ": the last row alone differs from its row in the batch";
    } else if (lt) {
        const Diff d = diff(y.host_f32(), y.device_f32());
        std::printf("%s: cuBLASLt FP8 relative L2 error %.3g (max abs %.3g)\n", c.name, d.rel_l2, d.max_abs);
        expect_close(y, 1e-3, c.name);
        const std::vector<float> first = y.device_f32();  // the same bits again
        b.gpu->linear(make(true));
        EXPECT_EQ(0, std::memcmp(first.data(), y.device_f32().data(), first.size() * sizeof(float)))
            << "not deterministic";
    } else {
        expect_close(y, 2e-5, c.name);
    }
    ASSERT_TRUE(b.gpu->force_variant("linear", ""));
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaLinearFp8Act,
                         ::testing::ValuesIn(variant_runs(kActCases, {"", "cublaslt_fp8", "fp8_mma",
                                                                      "split_rows", "stream_gemv", "tiled"})),
                         VariantRunName());

// split_rows quantises x in its registers (SplitJob::quant) and stream_gemv where it stages x: the bits of
// the same kernel on x quantised by the host's steps (ops/act_quant.h), on the quantiser's edge cases, at one
// to three tokens, alone and in linears().
TEST(CudaLinearFp8Act, GemvsQuantiseInTheKernelBitForBit) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto& b = backends();
    const int64_t in = 4096, out = 384;
    Pair data(DType::kF8E4M3, {out, in}), scale(DType::kE8M0, {(out + 127) / 128, in / 128});
    fill_fp8(data);
    fill_e8m0(scale);
    cuda::set_act_quant_in_kernels(true);  // stream_gemv's (split_rows always quantises in its registers)
    for (const std::string variant : {"split_rows", "stream_gemv"})
        for (const int64_t n : {int64_t(1), int64_t(2), int64_t(3)}) {
            if (variant == "split_rows" && n > 2) continue;  // split_rows takes one or two rows
            const std::string tag = variant + ", n " + std::to_string(n);
            const std::vector<float> rows = edge_rows(n, in);
            std::vector<float> deq(rows.size());
            for (int64_t r = 0; r < n; ++r)
                ops::fp8_block_quant_dequant_row(rows.data() + r * in, in, deq.data() + r * in);
            Pair x(DType::kF32, {n, in}), xd(DType::kF32, {n, in}), y(DType::kF32, {n, out}),
                want(DType::kF32, {n, out});
            std::copy(rows.begin(), rows.end(), x.hv().ptr<float>());
            std::copy(deq.begin(), deq.end(), xd.hv().ptr<float>());
            x.upload(), xd.upload();
            auto make = [&](bool native, Pair& yv) {
                ops::LinearArgs a;
                a.x = native ? x.dv() : xd.dv();
                a.y = yv.dv();
                a.w.format = WeightFormat::kFp8Block;
                a.w.data = data.dv(), a.w.scale = scale.dv();
                a.w.out_dim = out, a.w.in_dim = in;
                a.act = native ? ops::ActQuant::kFp8Block128 : ops::ActQuant::kNone;
                return a;
            };
            ASSERT_TRUE(b.gpu->force_variant("linear", variant));
            const int64_t ran0 = b.gpu->dispatch_count("linear", variant);
            y.poison(), want.poison();
            b.gpu->linear(make(false, want));
            b.gpu->linear(make(true, y));
            const std::vector<float> w = want.device_f32(), alone = y.device_f32();
            y.poison();
            const ops::LinearArgs jobs[] = {make(true, y)};
            b.gpu->linears(jobs);
            const std::vector<float> grouped = y.device_f32();
            ASSERT_TRUE(b.gpu->force_variant("linear", ""));
            EXPECT_EQ(b.gpu->dispatch_count("linear", variant) - ran0, 3) << tag;
            EXPECT_EQ(0, std::memcmp(w.data(), alone.data(), w.size() * sizeof(float))) << "linear, " << tag;
            EXPECT_EQ(0, std::memcmp(w.data(), grouped.data(), w.size() * sizeof(float)))
                << "linears, " << tag;
        }
    cuda::set_act_quant_in_kernels(false);
}

// linears() with fp8 activation blocks: the eight grouped output-projection jobs (strided slices of one x and
// y) at one token (split_rows in shared launches, x quantised in its registers) and at 40 and 37 tokens (each
// on cuBLASLt, their columns of x quantised as one block; 37: the GEMM's padding rows).
TEST(CudaLinearsFp8Act, GroupedJobsMatchRef) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto& b = backends();
    for (const int64_t n : {int64_t(1), int64_t(40), int64_t(37)}) {
        cuda::LtFp8Gemm* lt = cuda::LtFp8Gemm::instance();
        ASSERT_TRUE(lt && lt->supports(40, 4096, 1024, 4096, 8 * 1024))
            << "cuBLASLt takes no [40, 4096] x [1024, 4096]";
        Pair xs(DType::kF32, {n, 8 * 4096}), ys(DType::kF32, {n, 8 * 1024});
        fill_uniform(xs);
        ys.poison();
        Pair data(DType::kF8E4M3, {8 * 1024, 4096}), scale(DType::kE8M0, {8 * 1024 / 128, 4096 / 128});
        fill_fp8(data);
        fill_e8m0(scale);
        auto make = [&](bool dev) {
            std::vector<ops::LinearArgs> v;
            for (int64_t g = 0; g < 8; ++g) {
                ops::LinearArgs a;
                a.x = dev ? xs.dv() : xs.hv(), a.y = dev ? ys.dv() : ys.hv();
                a.x.data = static_cast<float*>(a.x.data) + g * 4096, a.x.shape[1] = 4096;
                a.y.data = static_cast<float*>(a.y.data) + g * 1024, a.y.shape[1] = 1024;
                a.w.format = WeightFormat::kFp8Block;
                a.w.data = dev ? data.dv() : data.hv();
                a.w.scale = dev ? scale.dv() : scale.hv();
                a.w.out_dim = 8 * 1024, a.w.in_dim = 4096;
                a.w = a.w.rows(g * 1024, 1024);
                a.act = ops::ActQuant::kFp8Block128;
                v.push_back(a);
            }
            return v;
        };
        const int64_t split0 = b.gpu->dispatch_count("linear", "split_rows");
        const int64_t lt0 = b.gpu->dispatch_count("linear", "cublaslt_fp8");
        for (const ops::LinearArgs& a : make(false)) b.ref->linear(a);
        b.gpu->linears(make(true));
        b.gpu->synchronize();
        expect_close(ys, n == 1 ? 2e-5 : 1e-3, "grouped projection, n " + std::to_string(n));
        EXPECT_EQ(b.gpu->dispatch_count("linear", "split_rows") - split0, n == 1 ? 8 : 0);
        EXPECT_EQ(b.gpu->dispatch_count("linear", "cublaslt_fp8") - lt0, n == 1 ? 0 : 8);
    }
}

// linears() on cuBLASLt with inputs shared or not: two jobs on the same x (as wq_a and wkv read y) and one on
// a part of it (columns 4096 ..: one span, quantised once), x and another x (each alone), x's column blocks
// 0 and 2 only (a gap: each alone). Every output against the reference.
TEST(CudaLinearsFp8Act, SharedInputsMatchRef) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto& b = backends();
    const int64_t n = 48, in = 3 * 4096;
    Pair x(DType::kF32, {n, in}), x2(DType::kF32, {n, 4096});
    fill_uniform(x), fill_uniform(x2);
    // weights [1024, in] and [1024, 4096]
    Pair wide(DType::kF8E4M3, {1024, in}), wide_s(DType::kE8M0, {1024 / 128, in / 128});
    Pair narrow(DType::kF8E4M3, {1024, 4096}), narrow_s(DType::kE8M0, {1024 / 128, 4096 / 128});
    fill_fp8(wide), fill_e8m0(wide_s), fill_fp8(narrow), fill_e8m0(narrow_s);
    Pair y0(DType::kF32, {n, 1024}), y1(DType::kF32, {n, 512}), y2(DType::kF32, {n, 1024}),
        y3(DType::kF32, {n, 1024});
    auto job = [&](bool dev, Pair& xp, int64_t c0, int64_t width, Pair& y, int64_t rows) {
        Pair& d = width == in ? wide : narrow;
        Pair& sc = width == in ? wide_s : narrow_s;
        ops::LinearArgs a;
        a.x = dev ? xp.dv() : xp.hv(), a.y = dev ? y.dv() : y.hv();
        a.x.data = static_cast<float*>(a.x.data) + c0, a.x.shape[1] = width;
        a.w.format = WeightFormat::kFp8Block;
        a.w.data = dev ? d.dv() : d.hv();
        a.w.scale = dev ? sc.dv() : sc.hv();
        a.w.out_dim = 1024, a.w.in_dim = width;
        a.w = a.w.rows(0, rows);
        a.act = ops::ActQuant::kFp8Block128;
        return a;
    };
    // one span (quantised once: two jobs on all of x, one on its columns 4096 ..), two inputs (each alone),
    // x's column blocks 0 and 2 (a gap: each alone)
    struct Run {
        const char* what;
        std::vector<std::tuple<Pair*, int64_t, int64_t, Pair*, int64_t>> jobs;  // x, c0, width, y, rows
    };
    const Run runs[] = {
        {"one span", {{&x, 0, in, &y0, 1024}, {&x, 0, in, &y1, 512}, {&x, 4096, 4096, &y2, 1024}}},
        {"two inputs", {{&x, 0, in, &y0, 1024}, {&x2, 0, 4096, &y3, 1024}}},
        {"columns with a gap", {{&x, 0, 4096, &y0, 1024}, {&x, 8192, 4096, &y2, 1024}}},
    };
    for (const Run& run : runs) {
        for (Pair* y : {&y0, &y1, &y2, &y3}) y->poison();
        auto make = [&](bool dev) {
            std::vector<ops::LinearArgs> v;
            for (const auto& [xp, c0, width, y, rows] : run.jobs)
                v.push_back(job(dev, *xp, c0, width, *y, rows));
            return v;
        };
        const int64_t lt0 = b.gpu->dispatch_count("linear", "cublaslt_fp8");
        for (const ops::LinearArgs& a : make(false)) b.ref->linear(a);
        b.gpu->linears(make(true));
        b.gpu->synchronize();
        EXPECT_EQ(b.gpu->dispatch_count("linear", "cublaslt_fp8") - lt0, int64_t(run.jobs.size()))
            << run.what;
        for (const auto& job_y : run.jobs) expect_close(*std::get<3>(job_y), 1e-3, run.what);
    }
}

// act_quant() on cuda (block-major scales) gives the host steps' codes and scales; linears() on its codes
// (LinearArgs' pre-quantised x: columns of the quantised rows, as wo_a's groups read the attention's output)
// give the bits of the same jobs quantising the f32 rows themselves: at 256 rows cuBLASLt reads the codes as
// they are, at 6 rows the codes go back to f32 for the kernels of f32 x, which quantise them to the same
// codes.
TEST(CudaActQuant, OpAndPrequantisedLinearsEqualQuantisingHere) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto& b = backends();
    const int64_t wide = 2048, in = 1024, out = 1024;
    Pair w(DType::kF8E4M3, {out, in}), ws(DType::kE8M0, {out / 128, in / 128});
    fill_fp8(w), fill_e8m0(ws);
    for (const int64_t n : {int64_t(256), int64_t(6)}) {
        SCOPED_TRACE(testing::Message() << "n " << n);
        Pair x(DType::kF32, {n, wide}), q(DType::kF8E4M3, {n, wide}), st(DType::kF32, {wide / 128, n});
        const std::vector<float> rows = edge_rows(n, wide);
        std::copy(rows.begin(), rows.end(), x.hv().ptr<float>());
        x.upload(), q.poison(), st.poison();
        auto scales_of = [&](bool dev) {
            TensorView s = dev ? st.dv() : st.hv();
            std::swap(s.shape[0], s.shape[1]), std::swap(s.stride[0], s.stride[1]);
            return s;
        };
        b.gpu->act_quant({.x = x.dv(), .q = q.dv(), .scales = scales_of(true)});
        Tensor hq(host_allocator(), DType::kF8E4M3, {n, wide}),
            hs(host_allocator(), DType::kF32, {wide / 128, n});
        TensorView hsv = hs.view();
        std::swap(hsv.shape[0], hsv.shape[1]), std::swap(hsv.stride[0], hsv.stride[1]);
        b.ref->act_quant({.x = x.hv(), .q = hq.view(), .scales = hsv});
        const std::vector<uint8_t> codes = q.device_as<uint8_t>();
        const std::vector<float> scales = st.device_f32();
        EXPECT_EQ(0, std::memcmp(codes.data(), hq.view().data, codes.size())) << "codes";
        EXPECT_EQ(0, std::memcmp(scales.data(), hs.view().data, scales.size() * sizeof(float))) << "scales";
        Pair y_f32(DType::kF32, {n, 2 * out}), y_q(DType::kF32, {n, 2 * out});
        y_f32.poison(), y_q.poison();
        auto jobs = [&](bool codes_in) {
            std::vector<ops::LinearArgs> v;
            for (int64_t g = 0; g < 2; ++g) {
                ops::LinearArgs a;
                a.w.format = WeightFormat::kFp8Block, a.w.data = w.dv(), a.w.scale = ws.dv();
                a.w.out_dim = out, a.w.in_dim = in;
                a.act = ops::ActQuant::kFp8Block128;
                a.y = (codes_in ? y_q : y_f32).dv();
                a.y.data = static_cast<float*>(a.y.data) + g * out, a.y.shape[1] = out;
                if (codes_in) {
                    a.x = q.dv(), a.x.data = static_cast<uint8_t*>(a.x.data) + g * in, a.x.shape[1] = in;
                    a.x_scales = scales_of(true);
                    a.x_scales.data = static_cast<float*>(a.x_scales.data) + g * (in / 128) * n;
                    a.x_scales.shape[1] = in / 128;
                } else {
                    a.x = x.dv(), a.x.data = static_cast<float*>(a.x.data) + g * in, a.x.shape[1] = in;
                }
                v.push_back(a);
            }
            return v;
        };
        for (const ops::LinearArgs& a : jobs(false)) b.gpu->linear(a);  // each alone, as the codes' jobs run
        const int64_t lt0 = b.gpu->dispatch_count("linear", "cublaslt_fp8");
        b.gpu->linears(jobs(true));
        b.gpu->synchronize();
        if (n == 256) EXPECT_EQ(b.gpu->dispatch_count("linear", "cublaslt_fp8") - lt0, 2);
        const std::vector<float> a = y_f32.device_f32(), c = y_q.device_f32();
        EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float))) << "linears on the codes";
    }
}

// A linear writing bf16 y (the native q on cuda): cuBLASLt's FP8 matmul writes its D in bf16 at 256 rows, the
// other variants (6 rows) the f32 result then cast. Against the same call into f32 y, rounded to nearest even
// on the host: bit for bit where the f32 path runs (6 rows); within one bf16 unit where cuBLASLt's bf16
// algorithm may sum in another order (256 rows; measured on an H100: every value equal). The reference's bf16
// y is its own f32 y rounded (tests/ops/cpu_linear_test.cpp), not compared here: where the edge rows cancel,
// the FP8 tensor cores' sums differ from its double ones by more than a bf16 unit (CudaLinearFp8Act's bound).
TEST(CudaLinearsFp8Act, Bf16OutputIsTheF32Rounded) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto& b = backends();
    const int64_t in = 1024, out = 1024;
    Pair w(DType::kF8E4M3, {out, in}), ws(DType::kE8M0, {out / 128, in / 128});
    fill_fp8(w), fill_e8m0(ws);
    for (const int64_t n : {int64_t(256), int64_t(6)}) {
        SCOPED_TRACE(testing::Message() << "n " << n);
        Pair x(DType::kF32, {n, in}), y(DType::kF32, {n, out}), y16(DType::kBF16, {n, out});
        const std::vector<float> rows = edge_rows(n, in);
        std::copy(rows.begin(), rows.end(), x.hv().ptr<float>());
        x.upload(), y.poison(), y16.poison();
        auto call = [&](const TensorView& yv) {
            ops::LinearArgs a;
            a.w.format = WeightFormat::kFp8Block, a.w.data = w.dv(), a.w.scale = ws.dv();
            a.w.out_dim = out, a.w.in_dim = in;
            a.act = ops::ActQuant::kFp8Block128;
            a.x = x.dv(), a.y = yv;
            return a;
        };
        b.gpu->linear(call(y.dv()));
        const int64_t lt0 = b.gpu->dispatch_count("linear", "cublaslt_fp8");
        b.gpu->linear(call(y16.dv()));
        b.gpu->synchronize();
        if (n == 256) EXPECT_EQ(b.gpu->dispatch_count("linear", "cublaslt_fp8") - lt0, 1);
        const std::vector<float> f = y.device_f32(), h = y16.device_f32();
        int64_t differ = 0;
        for (size_t i = 0; i < f.size(); ++i) {
            const float rounded = bf16_to_f32(f32_to_bf16(f[i])), unit = std::ldexp(std::fabs(rounded), -7);
            differ += h[i] != rounded;
            EXPECT_LE(std::fabs(h[i] - rounded), unit) << i;
        }
        if (n == 6) EXPECT_EQ(differ, 0);
        std::printf("linear bf16 y, %lld rows: %lld of %zu values off the f32 result rounded\n", (long long)n,
                    (long long)differ, f.size());
    }
}

// fp8_mma in linears(): a call's jobs of 2 rows (each quantising its own x in the kernel) and of 12 (the
// quantiser's copy, once for a span of columns of the same rows) give each job the bits it gets alone, and
// stay within cuBLASLt's 1e-3 of the reference.
TEST(CudaLinearsFp8Act, Fp8MmaJobsEqualEachAlone) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto& b = backends();
    for (const int64_t n : {2, 12}) {
        const int64_t in = 2 * 4096;
        Pair x(DType::kF32, {n, in}), w(DType::kF8E4M3, {1024, 4096}), ws(DType::kE8M0, {8, 32});
        fill_uniform(x, -3.0f, 3.0f), fill_fp8(w), fill_e8m0(ws);
        Pair y0(DType::kF32, {n, 1024}), y1(DType::kF32, {n, 512}), y2(DType::kF32, {n, 1024});
        auto job = [&](bool dev, int64_t c0, Pair& y, int64_t rows) {
            ops::LinearArgs a;
            a.x = dev ? x.dv() : x.hv(), a.y = dev ? y.dv() : y.hv();
            a.x.data = static_cast<float*>(a.x.data) + c0, a.x.shape[1] = 4096;
            a.w.format = WeightFormat::kFp8Block;
            a.w.data = dev ? w.dv() : w.hv();
            a.w.scale = dev ? ws.dv() : ws.hv();
            a.w.out_dim = 1024, a.w.in_dim = 4096;
            a.w = a.w.rows(0, rows);
            a.act = ops::ActQuant::kFp8Block128;
            return a;
        };
        // wq_a and wkv on the same columns, a third job on the next ones: one span
        auto make = [&](bool dev) {
            return std::vector<ops::LinearArgs>{job(dev, 0, y0, 1024), job(dev, 0, y1, 512),
                                                job(dev, 4096, y2, 1024)};
        };
        ASSERT_TRUE(b.gpu->force_variant("linear", "fp8_mma"));
        std::vector<std::vector<float>> alone;
        for (const ops::LinearArgs& a : make(true)) {
            b.gpu->linear(a);
            b.gpu->synchronize();
        }
        for (Pair* y : {&y0, &y1, &y2}) alone.push_back(y->device_f32()), y->poison();
        const int64_t before = b.gpu->dispatch_count("linear", "fp8_mma");
        for (const ops::LinearArgs& a : make(false)) b.ref->linear(a);
        b.gpu->linears(make(true));
        b.gpu->synchronize();
        ASSERT_TRUE(b.gpu->force_variant("linear", ""));
        EXPECT_EQ(b.gpu->dispatch_count("linear", "fp8_mma") - before, 3) << "n " << n;
        int i = 0;
        for (Pair* y : {&y0, &y1, &y2}) {
            const std::vector<float> got = y->device_f32();
            EXPECT_EQ(0, std::memcmp(got.data(), alone[size_t(i)].data(), got.size() * sizeof(float)))
                << "n " << n << ": job " << i << " in linears() differs from the job alone";
            expect_close(*y, 1e-3, "fp8_mma in linears()");
            ++i;
        }
    }
}

}  // namespace
}  // namespace di::gputest
