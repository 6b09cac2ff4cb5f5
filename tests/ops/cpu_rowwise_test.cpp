// rms_norm, rope and swiglu on cpu vs ref, bit for bit: the cpu runs the reference's code on blocks of rows
// over its pool, so a row's bits must not depend on which block it fell in (row counts that split and that
// do not, odd widths, a weighted and an unweighted norm, forward and inverse rope with a partial rope
// dimension, a finite and an infinite swiglu limit).
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_test_util.h"

namespace di::cputest {
namespace {

Tensor f32(std::initializer_list<int64_t> shape) { return Tensor(host_allocator(), DType::kF32, shape); }

Tensor copy_of(const Tensor& x) {
    Tensor y(host_allocator(), x.view().dtype, {x.view().numel()});
    std::memcpy(y.view().data, x.view().data, x.view().nbytes());
    return y;
}

bool same(const TensorView& a, const TensorView& b) {
    return std::memcmp(a.data, b.data, size_t(a.numel()) * 4) == 0;
}

TEST(CpuRowwise, RmsNormEqualsRef) {
    for (const auto& [n, d] : {std::pair<int64_t, int64_t>{1, 7}, {3, 1024}, {200, 1024}, {257, 37}})
        for (const bool weighted : {true, false}) {
            Tensor x = f32({n, d}), w = f32({d}), y_ref = f32({n, d}), y_cpu = f32({n, d});
            fill_uniform(x, -4, 4), fill_uniform(w, 0.5f, 1.5f), poison(y_ref), poison(y_cpu);
            ops::RmsNormArgs a{x, weighted ? w.view() : TensorView{}, y_ref, 1e-6f};
            backends().ref->rms_norm(a);
            a.y = y_cpu;
            backends().cpu->rms_norm(a);
            EXPECT_TRUE(same(y_ref, y_cpu)) << n << " x " << d << (weighted ? " weighted" : "");
        }
}

TEST(CpuRowwise, RopeEqualsRef) {
    for (const auto& [n, heads] : {std::pair<int64_t, int64_t>{1, 8}, {5, 1}, {300, 16}})
        for (const bool inverse : {false, true}) {
            const int64_t hd = 64, half = 16;  // rope on the trailing 32 of 64 dims
            Tensor x = f32({n, heads, hd}), inv = f32({half});
            Tensor pos(host_allocator(), DType::kI32, {n});
            fill_uniform(x, -2, 2);
            for (int64_t i = 0; i < half; ++i)
                inv.view().ptr<float>()[i] = std::pow(10000.0f, -float(i) / half);
            for (int64_t t = 0; t < n; ++t) pos.view().ptr<int32_t>()[t] = int32_t(17 * t + 3);
            Tensor x_cpu = copy_of(x);
            TensorView xc = x.view();
            xc.data = x_cpu.view().data;
            ops::RopeArgs a{x, pos, inv, 1.3f, inverse};
            backends().ref->rope(a);
            a.x = xc;
            backends().cpu->rope(a);
            EXPECT_TRUE(same(x.view(), xc)) << n << " x " << heads << (inverse ? " inverse" : "");
        }
}

TEST(CpuRowwise, SwigluEqualsRef) {
    for (const auto& [n, d] : {std::pair<int64_t, int64_t>{1, 5}, {4, 2048}, {97, 2048}})
        for (const float limit : {std::numeric_limits<float>::infinity(), 2.5f}) {
            Tensor g = f32({n, d}), u = f32({n, d}), o_ref = f32({n, d}), o_cpu = f32({n, d});
            fill_uniform(g, -6, 6), fill_uniform(u, -6, 6), poison(o_ref), poison(o_cpu);
            ops::SwigluArgs a{g, u, o_ref, limit};
            backends().ref->swiglu(a);
            a.out = o_cpu;
            backends().cpu->swiglu(a);
            EXPECT_TRUE(same(o_ref, o_cpu)) << n << " x " << d << ", limit " << limit;
        }
}

}  // namespace
}  // namespace di::cputest
