// Backend's default argmax: the rows through host copies, so it works on any backend's memory.
#include "ops/backend.h"

#include <tuple>
#include <vector>

namespace di::ops {

void Backend::argmax(const ArgmaxArgs& a) {
    check(a);
    const int64_t n = a.x.shape[0], V = a.x.shape[1];
    if (n == 0) return;
    Tensor row(host_allocator(), DType::kF32, {V});
    std::vector<int32_t> ids(static_cast<size_t>(n)), bad(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
        copy(row, a.x.rows(r, 1).reshape({V}));
        synchronize();
        std::tie(ids[size_t(r)], bad[size_t(r)]) = argmax_row(row.view().ptr<float>(), V);
    }
    copy(a.ids, TensorView::contiguous(ids.data(), DType::kI32, {n}));
    copy(a.bad, TensorView::contiguous(bad.data(), DType::kI32, {n}));
    synchronize();
}

}  // namespace di::ops
