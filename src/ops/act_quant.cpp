#include "ops/act_quant.h"

namespace di::ops {

TensorView fp8_block_quant_dequant(const TensorView& x, std::vector<float>& store) {
    const int64_t n = x.shape[0], in = x.shape[1];
    store.resize(size_t(n * in));
    for (int64_t r = 0; r < n; ++r)
        fp8_block_quant_dequant_row(x.ptr<const float>() + r * x.stride[0], in, store.data() + r * in);
    return TensorView::contiguous(store.data(), DType::kF32, {n, in});
}

}  // namespace di::ops
