// embed, add, swiglu, rms_norm, rope, window_store on CUDA vs ref. Element-wise ops must match to f32
// rounding (1e-6: the GPU evaluates the same f32/double expressions); rms_norm's sum of squares is in
// double on both sides, so only its reduction order differs (1e-6).
#include "gpu_test_util.h"

namespace di::gputest {
namespace {

#define SKIP_WITHOUT_GPU() \
    if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

TEST(CudaSmallOps, Embed) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    for (DType dt : {DType::kBF16, DType::kF32}) {
        Pair table(dt, {1000, 4096}), tokens(DType::kI32, {7}), out(DType::kF32, {7, 4096});
        fill_uniform(table);
        for (int i = 0; i < 7; ++i) tokens.hv().ptr<int32_t>()[i] = int32_t(rng()() % 1000);
        tokens.upload();
        out.poison();
        b.ref->embed({tokens.hv(), table.hv(), out.hv()});
        b.gpu->embed({tokens.dv(), table.dv(), out.dv()});
        expect_close(out, 0.0, "embed");  // a gather: exact
    }
}

TEST(CudaSmallOps, AddSwiglu) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    for (auto [n, d] : {std::pair<int64_t, int64_t>{1, 5}, {7, 2048}, {33, 4096}}) {
        Pair x(DType::kF32, {n, d}), y(DType::kF32, {n, d}), o(DType::kF32, {n, d});
        fill_uniform(x, -12, 12), fill_uniform(y, -12, 12), o.poison();
        b.ref->add({x.hv(), y.hv(), o.hv()});
        b.gpu->add({x.dv(), y.dv(), o.dv()});
        expect_close(o, 0.0, "add");  // one f32 addition: exact
        o.poison();
        b.ref->swiglu({x.hv(), y.hv(), o.hv(), 10.0f});  // swiglu_limit 10 (V4): clamps some of the inputs
        b.gpu->swiglu({x.dv(), y.dv(), o.dv(), 10.0f});
        expect_close(o, 1e-6, "swiglu");  // exp in double on both: libm vs CUDA may differ by an ulp
    }
}

TEST(CudaSmallOps, RmsNorm) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    struct C {
        int64_t n, d;
        DType w;
        bool weighted;
    };
    // a row of the hidden size, q's heads, q_lora's rows (a block a row), an odd width; a warp a row from
    // 512 down, with four rows a warp from 4,096 rows (the last warp's rows partly past n)
    for (C c :
         {C{1, 4096, DType::kBF16, true}, C{7 * 64, 512, DType::kF32, false}, C{5, 1024, DType::kF32, true},
          C{3, 77, DType::kBF16, true}, C{4101, 128, DType::kBF16, true}, C{9, 20, DType::kF32, true}}) {
        Pair x(DType::kF32, {c.n, c.d}), y(DType::kF32, {c.n, c.d}), w(c.w, {c.d});
        fill_uniform(x, -3, 3), fill_uniform(w, 0.5f, 1.5f), y.poison();
        b.ref->rms_norm({x.hv(), c.weighted ? w.hv() : TensorView{}, y.hv(), 1e-6f});
        b.gpu->rms_norm({x.dv(), c.weighted ? w.dv() : TensorView{}, y.dv(), 1e-6f});
        expect_close(y, 1e-6, "rms_norm d=" + std::to_string(c.d));
    }
}

TEST(CudaSmallOps, Rope) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    struct C {
        int64_t n, heads, hd, rope;
        float mscale;
        bool inverse;
    };
    // 64 heads (a thread rotates a pair in eight heads), 12 (groups of eight and four), one head
    for (C c : {C{3, 64, 512, 64, 1.0f, false}, C{2, 64, 512, 64, 1.0f, true}, C{4, 1, 10, 4, 1.3f, false},
                C{1, 64, 128, 64, 1.0f, false}, C{5, 12, 128, 32, 1.1f, true}}) {
        Pair x(DType::kF32, {c.n, c.heads, c.hd}), pos(DType::kI32, {c.n}), inv(DType::kF32, {c.rope / 2});
        fill_uniform(x);
        for (int64_t i = 0; i < c.n; ++i) pos.hv().ptr<int32_t>()[i] = int32_t(rng()() % 70000);
        for (int64_t i = 0; i < c.rope / 2; ++i)
            inv.hv().ptr<float>()[i] = std::pow(10000.0f, -2.0f * float(i) / float(c.rope));
        pos.upload(), inv.upload();
        b.ref->rope({x.hv(), pos.hv(), inv.hv(), c.mscale, c.inverse});
        b.gpu->rope({x.dv(), pos.dv(), inv.dv(), c.mscale, c.inverse});
        expect_close(x, 1e-6, "rope");  // same f32 products, cos/sin in double: ulp-level only
    }
}

TEST(CudaSmallOps, WindowStore) {
    SKIP_WITHOUT_GPU();
    auto& b = backends();
    struct C {
        int64_t L, ring, hd, pos0;
    };
    for (C c : {C{5, 127, 512, 300}, C{200, 127, 512, 0}, C{1, 7, 128, 6}, C{9, 3, 33, 2}}) {
        Pair kv(DType::kF32, {c.L, c.hd}), ring(DType::kF32, {c.ring, c.hd});
        fill_uniform(kv), fill_uniform(ring);
        b.ref->window_store({kv.hv(), ring.hv(), c.pos0});
        b.gpu->window_store({kv.dv(), ring.dv(), c.pos0});
        expect_close(ring, 0.0, "window_store");  // copies: exact
    }
}

}  // namespace
}  // namespace di::gputest
