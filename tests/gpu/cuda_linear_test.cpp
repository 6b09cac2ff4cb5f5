// linear on CUDA vs ref: every weight format, every variant (cublaslt_bf16x3, mma, split_rows, stream_gemv,
// warp_gemv, tiled and the default dispatch) on every case of the linear table (ops/op_cases.h) it applies
// to, odd sizes, strided x; the tolerance and its reason are the table's (kLinearCuda).
#include "gpu_test_util.h"
#include "ops/cuda/bf16_gemm.h"
#include "ops/op_cases.h"

namespace di::gputest {
namespace {

using ops::QWeight;
using ops::WeightFormat;

using ops::cases::LinearCase;
// The CUDA cases of the linear table (ops/op_cases.h).
const std::vector<LinearCase> kCases = ops::cases::linear_cases(ops::cases::kCudaTest);

using LinearRun = VariantRun<LinearCase>;

// Whether the streaming GEMV takes the case (its unit sizes and 16-byte rows; see gemv.cu).
bool stream_gemv_applies(const LinearCase& c) {
    const int64_t elems = c.fmt == WeightFormat::kFp8Block   ? 16
                          : c.fmt == WeightFormat::kFp4Group ? 32
                          : c.dense_dt == DType::kF32        ? 4
                                                             : 8;
    const int64_t row_bytes = c.fmt == WeightFormat::kDense      ? c.in * int64_t(dtype_size(c.dense_dt))
                              : c.fmt == WeightFormat::kFp8Block ? c.in
                                                                 : c.in / 2;
    return c.n <= 16 && c.in % elems == 0 && row_bytes % 16 == 0 && (c.in + c.x_pad) % 4 == 0;
}

// Whether split_rows takes the case (gemv_split.cu): one or two rows, in_dim 1024, 2048, 4096 or 8192.
bool split_rows_applies(const LinearCase& c) {
    return stream_gemv_applies(c) && c.n <= 2 &&
           (c.in == 1024 || c.in == 2048 || c.in == 4096 || c.in == 8192);
}

class CudaLinear : public ::testing::TestWithParam<LinearRun> {};

TEST_P(CudaLinear, MatchesRef) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const LinearCase& c = GetParam().c;
    const std::string variant = GetParam().variant;
    if (variant == "stream_gemv" && !stream_gemv_applies(c))
        GTEST_SKIP() << "stream_gemv does not take this case";
    if (variant == "split_rows" && !split_rows_applies(c))
        GTEST_SKIP() << "split_rows does not take this case";
    if (variant == "mma" && (c.fmt != WeightFormat::kFp8Block || c.in % 128 != 0 || c.out % 16 != 0))
        GTEST_SKIP() << "mma takes fp8 weights with in_dim a multiple of 128 and out_dim of 16";
    if (variant == "gemm" && (c.fmt != WeightFormat::kFp8Block || c.in % 128 != 0 || c.out % 64 != 0))
        GTEST_SKIP() << "gemm takes fp8 weights with in_dim a multiple of 128 and out_dim of 64";
    if (variant == "cublaslt_bf16x3" &&
        (c.fmt != WeightFormat::kDense || c.dense_dt != DType::kBF16 || c.in % 8 != 0 || c.out % 4 != 0))
        GTEST_SKIP() << "cublaslt_bf16x3 takes bf16 weights with in_dim a multiple of 8 and out_dim of 4";
    auto& b = backends();
    Pair x(DType::kF32, {c.n, c.in + c.x_pad}), y(DType::kF32, {c.n, c.out});
    fill_uniform(x);
    y.poison();
    Pair data, scale;
    if (c.fmt == WeightFormat::kDense) {
        data = Pair(c.dense_dt, {c.out, c.in});
        fill_uniform(data, -0.1f, 0.1f);
    } else if (c.fmt == WeightFormat::kFp8Block) {
        data = Pair(DType::kF8E4M3, {c.out, c.in});
        fill_fp8(data);
        scale = Pair(c.scale_dt, {(c.out + 127) / 128, (c.in + 127) / 128});
    } else {
        data = Pair(DType::kFP4x2, {c.out, c.in / 2});
        fill_uniform(data);
        scale = Pair(c.scale_dt, {c.out, c.in / 32});
    }
    if (c.fmt != WeightFormat::kDense) {
        if (c.scale_dt == DType::kE8M0)
            fill_e8m0(scale);
        else
            fill_uniform(scale, 0.01f, 0.1f);
    }
    auto make = [&](bool dev) {
        ops::LinearArgs a;
        TensorView xv = dev ? x.dv() : x.hv();
        xv.shape[1] = c.in;  // the first `in` columns; row stride stays in + pad
        a.x = xv;
        a.y = dev ? y.dv() : y.hv();
        a.w.format = c.fmt;
        a.w.data = dev ? data.dv() : data.hv();
        if (c.fmt != WeightFormat::kDense) a.w.scale = dev ? scale.dv() : scale.hv();
        a.w.out_dim = c.out;
        a.w.in_dim = c.in;
        return a;
    };
    ASSERT_TRUE(b.gpu->force_variant("linear", variant)) << variant;
    b.ref->linear(make(false));
    b.gpu->linear(make(true));
    b.gpu->synchronize();
    expect_close(y, ops::cases::kLinearCuda.value, c.name);
    if (!variant.empty()) EXPECT_GT(b.gpu->dispatch_count("linear", variant), 0) << variant << " did not run";
    if ((variant == "stream_gemv" || variant == "split_rows" || variant == "mma" || variant == "gemm") &&
        c.n > 1) {  // batch invariance: row 0 alone is bit-identical
        Pair y1(DType::kF32, {1, c.out});
        y1.poison();
        ops::LinearArgs one = make(true);
        one.x = one.x.rows(0, 1);
        one.y = y1.dv();
        b.gpu->linear(one);
        const std::vector<float> all = y.device_f32(), alone = y1.device_f32();
        EXPECT_EQ(0, std::memcmp(all.data(), alone.data(), size_t(c.out) * sizeof(float))) << c.name;
    }
    ASSERT_TRUE(b.gpu->force_variant("linear", ""));
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaLinear,
                         ::testing::ValuesIn(variant_runs(kCases,
                                                          {"", "cublaslt_bf16x3", "gemm", "mma", "split_rows",
                                                           "stream_gemv", "warp_gemv", "tiled"})),
                         VariantRunName());

}  // namespace
}  // namespace di::gputest

namespace di::gputest {
namespace {

// linears(): the grouped output projection's eight FP8 jobs (strided column slices of one x and one y),
// the shared expert's two FP4 jobs, a BF16 job of another in_dim and an n = 2 pair, all in one call; each
// job's result against the reference's linear, and the jobs split_rows shares launches for counted.
TEST(CudaLinears, GroupedJobsMatchRef) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto& b = backends();
    struct Job {
        int64_t n, in, out;
        WeightFormat fmt;
        int64_t col;  // column offset of x and y in their shared rows (0: own tensors)
    };
    std::vector<Job> spec;
    for (int g = 0; g < 8; ++g) spec.push_back({1, 4096, 1024, WeightFormat::kFp8Block, g});
    spec.push_back({1, 4096, 2048, WeightFormat::kFp4Group, -1});
    spec.push_back({1, 4096, 2048, WeightFormat::kFp4Group, -1});
    spec.push_back({1, 2048, 300, WeightFormat::kDense, -1});
    spec.push_back({2, 1024, 4096, WeightFormat::kFp8Block, -1});
    spec.push_back({2, 1024, 700, WeightFormat::kFp8Block, -1});
    spec.push_back({3, 512, 64, WeightFormat::kFp8Block, -1});  // no split_rows: runs alone
    Pair xs(DType::kF32, {1, 8 * 4096}), ys(DType::kF32, {1, 8 * 1024});
    fill_uniform(xs);
    ys.poison();
    std::vector<Pair> x(spec.size()), y(spec.size()), data(spec.size()), scale(spec.size());
    for (size_t i = 0; i < spec.size(); ++i) {
        const Job& j = spec[i];
        if (j.col < 0) {
            x[i] = Pair(DType::kF32, {j.n, j.in}), y[i] = Pair(DType::kF32, {j.n, j.out});
            fill_uniform(x[i]);
            y[i].poison();
        }
        if (j.fmt == WeightFormat::kDense) {
            data[i] = Pair(DType::kBF16, {j.out, j.in});
            fill_uniform(data[i], -0.1f, 0.1f);
        } else if (j.fmt == WeightFormat::kFp8Block) {
            data[i] = Pair(DType::kF8E4M3, {j.out, j.in});
            fill_fp8(data[i]);
            scale[i] = Pair(DType::kE8M0, {(j.out + 127) / 128, (j.in + 127) / 128});
            fill_e8m0(scale[i]);
        } else {
            data[i] = Pair(DType::kFP4x2, {j.out, j.in / 2});
            fill_uniform(data[i]);
            scale[i] = Pair(DType::kE8M0, {j.out, j.in / 32});
            fill_e8m0(scale[i]);
        }
    }
    auto make = [&](bool dev) {
        std::vector<ops::LinearArgs> v;
        for (size_t i = 0; i < spec.size(); ++i) {
            const Job& j = spec[i];
            ops::LinearArgs a;
            if (j.col >= 0) {
                TensorView xv = dev ? xs.dv() : xs.hv(), yv = dev ? ys.dv() : ys.hv();
                xv.data = static_cast<float*>(xv.data) + j.col * j.in, xv.shape[1] = j.in;
                yv.data = static_cast<float*>(yv.data) + j.col * j.out, yv.shape[1] = j.out;
                a.x = xv, a.y = yv;
            } else {
                a.x = dev ? x[i].dv() : x[i].hv(), a.y = dev ? y[i].dv() : y[i].hv();
            }
            a.w.format = j.fmt;
            a.w.data = dev ? data[i].dv() : data[i].hv();
            if (j.fmt != WeightFormat::kDense) a.w.scale = dev ? scale[i].dv() : scale[i].hv();
            a.w.out_dim = j.out, a.w.in_dim = j.in;
            v.push_back(a);
        }
        return v;
    };
    const int64_t split_before = b.gpu->dispatch_count("linear", "split_rows");
    const int64_t mma_before = b.gpu->dispatch_count("linear", "mma");
    for (const ops::LinearArgs& a : make(false)) b.ref->linear(a);
    b.gpu->linears(make(true));
    b.gpu->synchronize();
    expect_close(ys, 2e-5, "grouped projection");
    for (size_t i = 0; i < spec.size(); ++i)
        if (spec[i].col < 0) expect_close(y[i], 2e-5, "job " + std::to_string(i));
    // the n = 2 job on 4096 rows runs on mma; the other n = 2 job (700 rows: no 16-row tiles) on split_rows
    EXPECT_EQ(b.gpu->dispatch_count("linear", "split_rows") - split_before, 11) << "jobs in shared launches";
    EXPECT_EQ(b.gpu->dispatch_count("linear", "mma") - mma_before, 1);
}

}  // namespace
}  // namespace di::gputest

namespace di::gputest {
namespace {

// linears() with cublaslt_bf16x3 jobs on one x (as a CSA layer's compressor, indexer compressor and
// weights_proj read y): x split once for the jobs whose rows go in the same chunks, each job's bits those of
// linear() alone, and against the reference. 300 rows: every job in one chunk; 22,000 rows (past the
// 21,845-row chunk of 1,024 outputs): the 1,024-wide pair shares its chunks, the 256-wide pair its one chunk.
TEST(CudaLinears, Bf16x3SharedInputIsLinearAlone) {
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto& b = backends();
    const int64_t outs[] = {1024, 1024, 256, 256, 64};
    const bool share_default = cuda::bf16x3_share();
    cuda::set_bf16x3_share(true);
    for (const int64_t n : {int64_t(300), int64_t(22000)}) {
        const int64_t in = n > 1000 ? 64 : 512;
        Pair x(DType::kF32, {n, in + 8});  // strided rows
        fill_uniform(x);
        std::vector<Pair> w, y, y1;
        for (const int64_t out : outs) {
            w.push_back(Pair(DType::kBF16, {out, in}));
            fill_uniform(w.back(), -0.1f, 0.1f);
            y.push_back(Pair(DType::kF32, {n, out}));
            y1.push_back(Pair(DType::kF32, {n, out}));
            y.back().poison(), y1.back().poison();
        }
        auto job = [&](bool dev, size_t j, Pair& out) {
            ops::LinearArgs a;
            a.x = dev ? x.dv() : x.hv();
            a.x.shape[1] = in;
            a.y = dev ? out.dv() : out.hv();
            a.w.format = WeightFormat::kDense;
            a.w.data = dev ? w[j].dv() : w[j].hv();
            a.w.out_dim = outs[j], a.w.in_dim = in;
            return a;
        };
        std::vector<ops::LinearArgs> together;
        for (size_t j = 0; j < w.size(); ++j) together.push_back(job(true, j, y[j]));
        const int64_t bf0 = b.gpu->dispatch_count("linear", "cublaslt_bf16x3");
        b.gpu->linears(together);
        for (size_t j = 0; j < w.size(); ++j) b.gpu->linear(job(true, j, y1[j]));
        b.gpu->synchronize();
        EXPECT_EQ(b.gpu->dispatch_count("linear", "cublaslt_bf16x3") - bf0, int64_t(2 * w.size())) << n;
        for (size_t j = 0; j < w.size(); ++j) {
            const std::vector<float> shared = y[j].device_f32(), alone = y1[j].device_f32();
            EXPECT_EQ(0, std::memcmp(shared.data(), alone.data(), shared.size() * sizeof(float)))
                << "job " << j << ", " << n << " rows";
            b.ref->linear(job(false, j, y[j]));
            expect_close(y[j], ops::cases::kLinearCuda.value, "bf16x3 shared");
        }
    }
    cuda::set_bf16x3_share(share_default);
}

}  // namespace
}  // namespace di::gputest
