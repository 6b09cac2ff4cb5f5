// embed, cast, add, swiglu, rms_norm, rope, window_store on CUDA vs ref: the case table's row-wise cases and
// tolerances (ops/op_cases_rows.h, each with its reason); copy_many against the host's copies.
#include "gpu_test_util.h"
#include "ops/op_cases_rows.h"

namespace di::gputest {
namespace {

namespace cases = ops::cases;

#define SKIP_WITHOUT_GPU() \
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

TEST(CudaSmallOps, Embed) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    for (const DType od : {DType::kF32, DType::kBF16})  // bf16: the native precision's streams
        for (const cases::EmbedCase& c : cases::embed_cases()) {
            Pair table(c.table, {c.vocab, c.dim}), tokens(DType::kI32, {c.tokens}),
                out(od, {c.tokens, c.dim});
            fill_uniform(table);
            for (int64_t i = 0; i < c.tokens; ++i)
                tokens.hv().ptr<int32_t>()[i] = int32_t(rng()() % uint64_t(c.vocab));
            tokens.upload();
            out.poison();
            b.ref->embed({tokens.hv(), table.hv(), out.hv()});
            b.gpu->embed({tokens.dv(), table.dv(), out.dv()});
            expect_close(out, cases::kCopyExact.value,
                         std::string("embed ") + c.name + " " + dtype_name(od).data());
        }
}

// cast between f32 and bf16 (rows of a wider tensor, as the drafter's streams): the same rounding as the
// host's.
TEST(CudaSmallOps, Cast) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    for (const auto& [from, to] :
         {std::pair{DType::kF32, DType::kBF16}, {DType::kBF16, DType::kF32}, {DType::kF32, DType::kF32}}) {
        Pair x(from, {37, 300}), o(to, {37, 300});
        fill_uniform(x, -1e3f, 1e3f), o.poison();
        const auto cols = [](TensorView v) {  // columns 7 .. 258 (untouched ones stay poisoned on both sides)
            v.data = static_cast<char*>(v.data) + 7 * dtype_size(v.dtype);
            v.shape[1] = 252;
            return v;
        };
        b.ref->cast({cols(x.hv()), cols(o.hv())});
        b.gpu->cast({cols(x.dv()), cols(o.dv())});
        expect_close(o, cases::kCopyExact.value,
                     std::string("cast ") + dtype_name(from).data() + " to " + dtype_name(to).data());
    }
}

TEST(CudaSmallOps, AddSwiglu) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    for (const cases::ElementwiseCase& c : cases::elementwise_cases()) {
        Pair x(DType::kF32, {c.n, c.d}), y(DType::kF32, {c.n, c.d}), o(DType::kF32, {c.n, c.d});
        fill_uniform(x, -12, 12), fill_uniform(y, -12, 12), o.poison();
        b.ref->add({x.hv(), y.hv(), o.hv()});
        b.gpu->add({x.dv(), y.dv(), o.dv()});
        expect_close(o, cases::kCopyExact.value, std::string("add ") + c.name);
        o.poison();
        b.ref->swiglu({x.hv(), y.hv(), o.hv(), 10.0f});  // swiglu_limit 10 (V4): clamps some of the inputs
        b.gpu->swiglu({x.dv(), y.dv(), o.dv(), 10.0f});
        expect_close(o, cases::kSwigluCuda.value, std::string("swiglu ") + c.name);
    }
}

TEST(CudaSmallOps, RmsNorm) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    for (const cases::NormCase& c : cases::norm_cases()) {
        Pair x(DType::kF32, {c.n, c.d}), y(DType::kF32, {c.n, c.d}), w(c.w, {c.d});
        fill_uniform(x, -3, 3), fill_uniform(w, 0.5f, 1.5f), y.poison();
        b.ref->rms_norm({x.hv(), c.weighted ? w.hv() : TensorView{}, y.hv(), 1e-6f});
        b.gpu->rms_norm({x.dv(), c.weighted ? w.dv() : TensorView{}, y.dv(), 1e-6f});
        expect_close(y, cases::kRmsNormCuda.value, std::string("rms_norm ") + c.name);
    }
}

TEST(CudaSmallOps, Rope) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    for (const cases::RopeCase& c : cases::rope_cases()) {
        Pair x(DType::kF32, {c.n, c.heads, c.hd}), pos(DType::kI32, {c.n}), inv(DType::kF32, {c.rope / 2});
        fill_uniform(x);
        for (int64_t i = 0; i < c.n; ++i) pos.hv().ptr<int32_t>()[i] = int32_t(rng()() % 70000);
        for (int64_t i = 0; i < c.rope / 2; ++i)
            inv.hv().ptr<float>()[i] = std::pow(10000.0f, -2.0f * float(i) / float(c.rope));
        pos.upload(), inv.upload();
        b.ref->rope({x.hv(), pos.hv(), inv.hv(), c.mscale, c.inverse});
        b.gpu->rope({x.dv(), pos.dv(), inv.dv(), c.mscale, c.inverse});
        expect_close(x, cases::kRopeCuda.value, std::string("rope ") + c.name);
    }
}

TEST(CudaSmallOps, WindowStore) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    for (const cases::WindowStoreCase& c : cases::window_store_cases()) {
        Pair kv(DType::kF32, {c.L, c.hd}), ring(DType::kF32, {c.ring, c.hd});
        fill_uniform(kv), fill_uniform(ring);
        b.ref->window_store({kv.hv(), ring.hv(), c.pos0});
        b.gpu->window_store({kv.dv(), ring.dv(), c.pos0});
        expect_close(ring, cases::kCopyExact.value, std::string("window_store ") + c.name);
    }
}

// copy_many: every pair copied as copy would (aligned rows in 16-byte units, odd byte counts and offsets
// byte by byte, more pairs than one launch's table), nothing outside the destinations written.
TEST(CudaSmallOps, CopyManyEqualsEachCopy) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    constexpr int64_t kRows = 300, kCols = 37;  // 37-byte rows: most start off a 16-byte boundary
    Pair src(DType::kU8, {kRows, kCols}), dst(DType::kU8, {kRows, kCols});
    for (int64_t i = 0; i < kRows * kCols; ++i) src.hv().ptr<uint8_t>()[i] = uint8_t(rng()());
    src.upload(), dst.poison();
    Pair big_src(DType::kU8, {3, 1 << 18}), big_dst(DType::kU8, {3, 1 << 18});
    for (int64_t i = 0; i < 3 << 18; ++i) big_src.hv().ptr<uint8_t>()[i] = uint8_t(rng()());
    big_src.upload(), big_dst.poison();
    std::vector<ops::Backend::CopyPair> pairs;
    for (int64_t r = 0; r + 1 < kRows; r += 2) {  // every other row, reversed: 150 pairs, two launches
        pairs.push_back({dst.dv().rows(kRows - 1 - r, 1), src.dv().rows(r, 1)});
        b.ref->copy(dst.hv().rows(kRows - 1 - r, 1), src.hv().rows(r, 1));
    }
    pairs.push_back({big_dst.dv().rows(0, 2), big_src.dv().rows(1, 2)});  // 512 KB, aligned
    b.ref->copy(big_dst.hv().rows(0, 2), big_src.hv().rows(1, 2));
    b.gpu->copy_many(pairs);
    const auto host_bytes = [](const Pair& p) {
        const auto* h = p.hv().ptr<uint8_t>();
        return std::vector<uint8_t>(h, h + p.hv().nbytes());
    };
    EXPECT_EQ(dst.device_as<uint8_t>(), host_bytes(dst)) << "37-byte rows";
    EXPECT_EQ(big_dst.device_as<uint8_t>(), host_bytes(big_dst)) << "512 KB";
}

}  // namespace
}  // namespace di::gputest
