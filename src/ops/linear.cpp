#include "ops/linear.h"

#include <vector>

#include "ops/act_quant.h"

namespace di::ops {

QWeight QWeight::rows(int64_t begin, int64_t n) const {
    DI_CHECK(begin >= 0 && begin + n <= out_dim, "weight rows({}, {}) of {} rows", begin, n, out_dim);
    QWeight r = *this;
    r.data = data.rows(begin, n);
    r.out_dim = n;
    if (format == WeightFormat::kFp8Block) {
        DI_CHECK(begin % kFp8Block == 0 && (n % kFp8Block == 0 || begin + n == out_dim),
                 "fp8 row slice {}+{} not on a 128-row block", begin, n);
        r.scale = scale.rows(begin / kFp8Block, (n + kFp8Block - 1) / kFp8Block);
    } else if (format == WeightFormat::kFp4Group) {
        r.scale = scale.rows(begin, n);
    }
    return r;
}

static float load_scale(const TensorView& s, int64_t r, int64_t c) {
    const int64_t i = r * s.stride[0] + c * s.stride[1];
    return s.dtype == DType::kE8M0 ? e8m0_to_f32(s.ptr<uint8_t>()[i]) : s.ptr<float>()[i];
}

std::string_view weight_format_name(const QWeight& w) {
    switch (w.format) {
        case WeightFormat::kFp8Block:
            return "fp8";
        case WeightFormat::kFp4Group:
            return "fp4";
        default:
            return dtype_name(w.data.dtype);
    }
}

float QWeight::at(int64_t o, int64_t i) const {
    switch (format) {
        case WeightFormat::kDense:
            return load_float(data.data, data.dtype, o * data.stride[0] + i);
        case WeightFormat::kFp8Block:
            return fp8_e4m3_to_f32(data.ptr<uint8_t>()[o * data.stride[0] + i]) *
                   load_scale(scale, o / kFp8Block, i / kFp8Block);
        case WeightFormat::kFp4Group:
            return fp4_at(data.ptr<uint8_t>() + o * data.stride[0], i) * load_scale(scale, o, i / kFp4Group);
    }
    return 0.0f;
}

void check(const LinearArgs& a) {
    check_rows(a.x, 2, "linear.x");
    check_rows(a.y, 2, "linear.y");
    if (a.x.dtype == DType::kF8E4M3) {  // quantised beforehand
        DI_CHECK(a.act == ActQuant::kFp8Block128, "linear: e4m3 x {} needs the fp8 activation blocks",
                 a.x.describe());
        check_dtype(a.x_scales, DType::kF32, "linear.x_scales");
        DI_CHECK(a.x_scales.ndim == 2 && a.x_scales.shape[0] == a.x.shape[0] &&
                     a.x_scales.shape[1] * kActBlock == a.x.shape[1],
                 "linear: x {} x_scales {}", a.x.describe(), a.x_scales.describe());
    } else {
        check_dtype(a.x, DType::kF32, "linear.x");
        DI_CHECK(a.x_scales.empty(), "linear: x_scales {} with f32 x", a.x_scales.describe());
    }
    DI_CHECK(a.y.dtype == DType::kF32 || a.y.dtype == DType::kBF16, "linear.y {} is not f32 or bf16",
             a.y.describe());
    DI_CHECK(a.x.shape[0] == a.y.shape[0], "linear: x rows {} != y rows {}", a.x.shape[0], a.y.shape[0]);
    DI_CHECK(a.x.shape[1] == a.w.in_dim && a.y.shape[1] == a.w.out_dim,
             "linear: x {} y {} vs weight [{}, {}]", a.x.describe(), a.y.describe(), a.w.out_dim, a.w.in_dim);
    DI_CHECK(a.act == ActQuant::kNone || a.w.in_dim % kActBlock == 0,
             "linear: fp8 activation blocks need in_dim a multiple of {}, got {}", kActBlock, a.w.in_dim);
    check_row_groups(a.row_groups, a.x.shape[0], "linear");
}

bool linear_via_f32(const LinearArgs& a, const std::function<void(const LinearArgs&)>& f32_linear) {
    if (a.y.dtype != DType::kBF16) return false;
    const int64_t n = a.y.shape[0], out = a.y.shape[1];
    std::vector<float> f(size_t(n * out));
    LinearArgs fa = a;
    fa.y = TensorView::contiguous(f.data(), DType::kF32, {n, out});
    f32_linear(fa);
    auto* y = a.y.ptr<uint16_t>();
    for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < out; ++c) y[r * a.y.stride[0] + c] = f32_to_bf16(f[size_t(r * out + c)]);
    return true;
}

void check_row_groups(std::span<const int64_t> groups, int64_t rows, const char* op) {
    int64_t sum = 0;
    for (int64_t g : groups) {
        DI_CHECK(g > 0, "{}: row group of {} rows", op, g);
        sum += g;
    }
    DI_CHECK(groups.empty() || sum == rows, "{}: row groups of {} rows for {} rows", op, sum, rows);
}

}  // namespace di::ops
