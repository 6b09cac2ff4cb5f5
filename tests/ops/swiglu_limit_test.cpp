// The swiglu_limit contract (ops/elementwise.h): limit > 0 clamps, +inf (the default of SwigluArgs and
// MoeArgs) does not, and 0, a negative value or NaN is refused by check() on every backend instead of
// silently clamping everything to 0.
#include <cmath>

#include "cpu_test_util.h"
#include "ops/elementwise.h"
#include "ops/moe.h"

namespace di::cputest {
namespace {

Tensor host_f32(std::initializer_list<int64_t> shape) { return Tensor(host_allocator(), DType::kF32, shape); }

TEST(SwigluLimit, DefaultIsNoClampOnRefAndCpu) {
    EXPECT_TRUE(std::isinf(ops::SwigluArgs{}.limit) && ops::SwigluArgs{}.limit > 0);
    EXPECT_TRUE(std::isinf(ops::MoeArgs{}.limit) && ops::MoeArgs{}.limit > 0);
    Tensor g = host_f32({1, 3}), u = host_f32({1, 3}), o = host_f32({1, 3});
    const float gv[] = {30.0f, -2.0f, 0.5f}, uv[] = {40.0f, 3.0f, -50.0f};
    for (int i = 0; i < 3; ++i) g.view().ptr<float>()[i] = gv[i], u.view().ptr<float>()[i] = uv[i];
    for (ops::Backend* be : {static_cast<ops::Backend*>(backends().ref.get()),
                             static_cast<ops::Backend*>(backends().cpu.get())}) {
        ops::SwigluArgs a;
        a.gate = g.view(), a.up = u.view(), a.out = o.view();
        be->swiglu(a);
        for (int i = 0; i < 3; ++i) {
            const double want =
                double(gv[i]) / (1.0 + std::exp(-double(gv[i]))) * double(uv[i]);  // unclamped
            EXPECT_NEAR(o.view().ptr<float>()[i], want, 1e-5 * std::abs(want))
                << be->name() << " element " << i;
        }
    }
}

TEST(SwigluLimitDeathTest, ZeroNegativeAndNanAreRefused) {
    Tensor g = host_f32({1, 2}), u = host_f32({1, 2}), o = host_f32({1, 2});
    for (float bad : {0.0f, -1.0f, NAN}) {
        ops::SwigluArgs a{g.view(), u.view(), o.view(), bad};
        EXPECT_DEATH(ops::check(a), "swiglu: limit .* must be > 0") << bad;
    }
}

}  // namespace
}  // namespace di::cputest
