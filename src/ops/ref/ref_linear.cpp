// Reference linear: dequantise one weight row at a time, dot products in double.
#include <vector>

#include "ops/act_quant.h"
#include "ops/ref/ref_backend_impl.h"

namespace di::ops {

void RefBackend::linear(const LinearArgs& in_args) {
    check(in_args);
    if (linear_via_f32(in_args, [&](const LinearArgs& f) { linear(f); })) return;
    std::vector<float> xq;
    LinearArgs a = in_args;
    if (a.x.dtype == DType::kF8E4M3)  // quantised beforehand: the same values as quantised here
        a.x = fp8_block_dequant(a.x, a.x_scales, xq);
    else if (a.act == ActQuant::kFp8Block128)
        a.x = fp8_block_quant_dequant(a.x, xq);
    const int64_t n = a.x.shape[0], in = a.w.in_dim, out = a.w.out_dim;
    std::vector<float> wrow(static_cast<size_t>(in));
    for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) wrow[size_t(i)] = a.w.at(o, i);
        for (int64_t r = 0; r < n; ++r) {
            const float* x = row_f32(a.x, r);
            double acc = 0;
            for (int64_t i = 0; i < in; ++i) acc += double(x[i]) * wrow[size_t(i)];
            row_f32(a.y, r)[o] = float(acc);
        }
    }
}

}  // namespace di::ops
