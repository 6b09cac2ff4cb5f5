#include "model/workspace.h"

#include <algorithm>

#include "core/check.h"
#include "ops/backend.h"

namespace di::model {

namespace {
constexpr size_t kAlign = 256;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void Workspace::reset() {
    if (blocks_.size() > 1 || (blocks_.empty() && peak_ > 0)) {
        capacity_ = round_up(std::max(peak_, capacity_));
        blocks_.clear();
        blocks_.emplace_back(*alloc_, DType::kU8, std::initializer_list<int64_t>{int64_t(capacity_)});
        ++generation_;
    }
    current_ = 0;
    used_ = 0;
    peak_ = 0;
    offset_ = 0;
}

TensorView Workspace::take(DType dtype, std::initializer_list<int64_t> shape) {
    TensorView v = TensorView::contiguous(nullptr, dtype, shape, alloc_->device());
    const size_t bytes = round_up(std::max<size_t>(v.nbytes(), 1));
    auto size_of = [&](size_t b) { return size_t(blocks_[b].view().numel()); };
    // the current block, else the next block kept from before a rewind that holds it, else a new one
    if (blocks_.empty() || offset_ + bytes > size_of(current_)) {
        size_t b = blocks_.empty() ? 0 : current_ + 1;
        while (b < blocks_.size() && bytes > size_of(b)) ++b;
        if (b == blocks_.size()) {
            blocks_.emplace_back(*alloc_, DType::kU8,
                                 std::initializer_list<int64_t>{int64_t(std::max(bytes, size_t(1) << 20))});
            ++generation_;
        }
        current_ = b;
        offset_ = 0;
    }
    v.data = static_cast<char*>(blocks_[current_].view().data) + offset_;
    offset_ += bytes;
    used_ += bytes;
    peak_ = std::max(peak_, used_);
    return v;
}

void Workspace::rewind(const Mark& m) {
    DI_CHECK(m.used <= used_ && m.block <= current_ && (blocks_.empty() || m.block < blocks_.size()),
             "workspace rewind to {} bytes with {} in use", m.used, used_);
    current_ = m.block;
    offset_ = m.offset;
    used_ = m.used;
}

size_t Workspace::held() const {
    size_t n = 0;
    for (const Tensor& b : blocks_) n += size_t(b.view().numel());
    return n;
}

TensorView upload_i32(Workspace& ws, ops::Backend& be, const std::vector<int32_t>& host) {
    TensorView dst = ws.take(DType::kI32, {int64_t(host.size())});
    be.copy(dst,
            TensorView::contiguous(const_cast<int32_t*>(host.data()), DType::kI32, {int64_t(host.size())}));
    return dst;
}

}  // namespace di::model
