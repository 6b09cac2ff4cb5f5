#include "model/workspace.h"

#include <algorithm>

#include "ops/backend.h"

namespace di::model {

namespace {
constexpr size_t kAlign = 256;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void Workspace::reset() {
    if (blocks_.size() > 1 || (blocks_.empty() && used_ > 0)) {
        capacity_ = round_up(std::max(used_, capacity_));
        blocks_.clear();
        blocks_.emplace_back(*alloc_, DType::kU8, std::initializer_list<int64_t>{int64_t(capacity_)});
        ++generation_;
    }
    used_ = 0;
    offset_ = 0;
}

TensorView Workspace::take(DType dtype, std::initializer_list<int64_t> shape) {
    TensorView v = TensorView::contiguous(nullptr, dtype, shape, alloc_->device());
    const size_t bytes = round_up(std::max<size_t>(v.nbytes(), 1));
    const size_t block_size = blocks_.empty() ? 0 : size_t(blocks_.back().view().numel());
    if (blocks_.empty() || offset_ + bytes > block_size) {
        blocks_.emplace_back(*alloc_, DType::kU8,
                             std::initializer_list<int64_t>{int64_t(std::max(bytes, size_t(1) << 20))});
        offset_ = 0;
        ++generation_;
    }
    v.data = static_cast<char*>(blocks_.back().view().data) + offset_;
    offset_ += bytes;
    used_ += bytes;
    return v;
}

TensorView upload_i32(Workspace& ws, ops::Backend& be, const std::vector<int32_t>& host) {
    TensorView dst = ws.take(DType::kI32, {int64_t(host.size())});
    be.copy(dst,
            TensorView::contiguous(const_cast<int32_t*>(host.data()), DType::kI32, {int64_t(host.size())}));
    return dst;
}

}  // namespace di::model
