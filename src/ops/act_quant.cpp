#include "ops/act_quant.h"

namespace di::ops {

TensorView fp8_block_quant_dequant(const TensorView& x, std::vector<float>& store) {
    const int64_t n = x.shape[0], in = x.shape[1];
    store.resize(size_t(n * in));
    for (int64_t r = 0; r < n; ++r)
        fp8_block_quant_dequant_row(x.ptr<const float>() + r * x.stride[0], in, store.data() + r * in);
    return TensorView::contiguous(store.data(), DType::kF32, {n, in});
}

void check(const ActQuantArgs& a) {
    check_rows(a.x, 2, "act_quant.x");
    check_rows(a.q, 2, "act_quant.q");
    check_dtype(a.x, DType::kF32, "act_quant.x");
    check_dtype(a.q, DType::kF8E4M3, "act_quant.q");
    check_dtype(a.scales, DType::kF32, "act_quant.scales");
    const int64_t n = a.x.shape[0], in = a.x.shape[1];
    DI_CHECK(in % kActBlock == 0 && a.q.shape[0] == n && a.q.shape[1] == in && a.scales.ndim == 2 &&
                 a.scales.shape[0] == n && a.scales.shape[1] * kActBlock == in,
             "act_quant: x {} q {} scales {}", a.x.describe(), a.q.describe(), a.scales.describe());
}

void fp8_block_quant(const ActQuantArgs& a) {
    check(a);
    const int64_t n = a.x.shape[0], in = a.x.shape[1];
    for (int64_t r = 0; r < n; ++r) {
        const float* x = a.x.ptr<const float>() + r * a.x.stride[0];
        uint8_t* q = a.q.ptr<uint8_t>() + r * a.q.stride[0];
        for (int64_t b = 0; b < in / kActBlock; ++b) {
            float amax = 0.0f;
            for (int64_t i = b * kActBlock; i < (b + 1) * kActBlock; ++i)
                amax = std::max(amax, std::fabs(x[i]));
            const float s = act_block_scale(amax);
            for (int64_t i = b * kActBlock; i < (b + 1) * kActBlock; ++i)
                q[i] = fp8_e4m3_bits(round_to_fp8_e4m3(std::min(std::max(x[i] / s, -kFp8Max), kFp8Max)));
            a.scales.ptr<float>()[r * a.scales.stride[0] + b * a.scales.stride[1]] = s;
        }
    }
}

TensorView fp8_block_dequant(const TensorView& q, const TensorView& scales, std::vector<float>& store) {
    const int64_t n = q.shape[0], in = q.shape[1];
    store.resize(size_t(n * in));
    for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < in; ++i)
            store[size_t(r * in + i)] =
                fp8_e4m3_to_f32(q.ptr<const uint8_t>()[r * q.stride[0] + i]) *
                scales.ptr<const float>()[r * scales.stride[0] + (i / kActBlock) * scales.stride[1]];
    return TensorView::contiguous(store.data(), DType::kF32, {n, in});
}

}  // namespace di::ops
