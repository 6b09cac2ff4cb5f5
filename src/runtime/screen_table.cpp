// The case table's linear cases that the screen takes (ops/op_cases.h, kScreen): odd sizes and scale formats
// that a model's own matrices may not have, on weights drawn here, each at the case's own row count.
#include <algorithm>

#include "core/dtype.h"
#include "ops/op_cases.h"
#include "runtime/screen_judge.h"

namespace di::runtime::screen_detail {
namespace {

// A random weight of the case's format on the host: dense values in [-0.1, 0.1], fp8 codes other than NaN,
// fp4 codes, UE8M0 scales 2^-7 .. 2^3 or f32 scales in [0.01, 0.1].
struct DrawnWeight {
    Tensor data, scale;
    ops::QWeight w;
};

DrawnWeight draw(const ops::cases::LinearCase& c, std::mt19937_64& rng) {
    DrawnWeight d;
    const int64_t O = c.out, K = c.in;
    if (c.fmt == ops::WeightFormat::kDense) {
        Tensor f = host_tensor(DType::kF32, {O, K});
        fill_uniform(f, rng, -0.1f, 0.1f);
        d.data = host_tensor(c.dense_dt, {O, K});
        const float* src = f.view().ptr<float>();
        for (int64_t i = 0; i < O * K; ++i)
            if (c.dense_dt == DType::kBF16)
                d.data.view().ptr<uint16_t>()[i] = f32_to_bf16(src[i]);
            else
                d.data.view().ptr<float>()[i] = src[i];
    } else {
        const bool fp8 = c.fmt == ops::WeightFormat::kFp8Block;
        d.data = host_tensor(fp8 ? DType::kF8E4M3 : DType::kFP4x2, {O, fp8 ? K : K / 2});
        auto* b = static_cast<uint8_t*>(d.data.view().data);
        for (int64_t i = 0; i < d.data.view().numel(); ++i) {
            b[i] = uint8_t(rng());
            if (fp8 && (b[i] & 0x7f) == 0x7f) b[i] &= 0xfe;  // e4m3's NaN codes
        }
        d.scale = fp8 ? host_tensor(c.scale_dt, {(O + 127) / 128, (K + 127) / 128})
                      : host_tensor(c.scale_dt, {O, K / 32});
        if (c.scale_dt == DType::kE8M0) {
            auto* s = static_cast<uint8_t*>(d.scale.view().data);
            for (int64_t i = 0; i < d.scale.view().numel(); ++i) s[i] = uint8_t(120 + rng() % 11);
        } else {
            fill_uniform(d.scale, rng, 0.01f, 0.1f);
        }
    }
    d.w = {c.fmt, d.data.view(), c.fmt == ops::WeightFormat::kDense ? TensorView{} : d.scale.view(), O, K};
    return d;
}

// What draw() takes: f32 and bf16 dense, fp8 and fp4 (whole 32-element groups).
bool drawable(const ops::cases::LinearCase& c) {
    if (c.fmt == ops::WeightFormat::kDense) return c.dense_dt == DType::kF32 || c.dense_dt == DType::kBF16;
    return c.fmt == ops::WeightFormat::kFp8Block || c.in % 32 == 0;
}

}  // namespace

void screen_table_linears(ops::Backend& be, const std::vector<ops::KernelVariant>& variants,
                          std::mt19937_64& rng, std::vector<ScreenRow>& rows) {
    const auto cands = candidates(variants, "linear");
    if (cands.empty()) return;
    for (const ops::cases::LinearCase& c : ops::cases::linear_cases(ops::cases::kScreen)) {
        if (!drawable(c) || c.n < 1) continue;
        const DrawnWeight host = draw(c, rng);
        const Buf data = on_device(be, host.data);
        ops::QWeight dev = host.w;
        dev.data = data.v;
        Buf scale;
        if (!host.w.scale.empty()) scale = on_device(be, host.scale), dev.scale = scale.v;
        for (const ops::KernelVariant* v : cands)
            rows.push_back(screen_linear(be, *v, dev, host.w, c.n, rng));
    }
}

}  // namespace di::runtime::screen_detail
