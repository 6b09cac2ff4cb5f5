#include "core/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace di {

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.device = device;
    v.ndim = int(shape.size());
    DI_CHECK(v.ndim <= kMaxDims, "too many dims: {}", v.ndim);
    int i = 0;
    for (int64_t s : shape) v.shape[i++] = s;
    int64_t st = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
        v.stride[d] = st;
        st *= v.shape[d];
    }
    return v;
}

int64_t TensorView::numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
}

bool TensorView::is_contiguous() const {
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        if (shape[d] != 1 && stride[d] != st) return false;
        st *= shape[d];
    }
    return true;
}

size_t TensorView::span_bytes() const {
    if (numel() == 0) return 0;
    int64_t last = 0;
    for (int d = 0; d < ndim; ++d) last += (shape[size_t(d)] - 1) * stride[size_t(d)];
    return size_t(last + 1) * dtype_size(dtype);
}

TensorView TensorView::rows(int64_t begin, int64_t n) const {
    DI_CHECK(ndim >= 1 && begin >= 0 && begin + n <= shape[0], "rows({}, {}) of {}", begin, n, describe());
    TensorView v = *this;
    v.data = static_cast<char*>(data) + begin * stride[0] * int64_t(dtype_size(dtype));
    v.shape[0] = n;
    return v;
}

TensorView TensorView::reshape(std::initializer_list<int64_t> new_shape) const {
    DI_CHECK(is_contiguous(), "reshape of non-contiguous {}", describe());
    TensorView v = contiguous(data, dtype, new_shape, device);
    DI_CHECK(v.numel() == numel(), "reshape {} to {} elements", describe(), v.numel());
    return v;
}

std::string TensorView::describe() const {
    std::string s = std::string(dtype_name(dtype)) + "[";
    for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

namespace {
class HostAllocator final : public Allocator {
  public:
    void* allocate(size_t bytes) override {
        void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
        DI_CHECK(p != nullptr, "host allocation of {} bytes failed", bytes);
        return p;
    }
    void deallocate(void* p) override { std::free(p); }
    Device device() const override { return Device::kHost; }
};
}  // namespace

Allocator& host_allocator() {
    static HostAllocator a;
    return a;
}

Tensor::Tensor(Allocator& alloc, DType dtype, std::initializer_list<int64_t> shape) {
    view_ = TensorView::contiguous(nullptr, dtype, shape, alloc.device());
    const size_t bytes = std::max<size_t>(view_.nbytes(), 1);
    mem_ = std::unique_ptr<void, Free>(alloc.allocate(bytes), Free{&alloc});
    view_.data = mem_.get();
}

Tensor Tensor::zeros_host(DType dtype, std::initializer_list<int64_t> shape) {
    Tensor t(host_allocator(), dtype, shape);
    std::memset(t.view_.data, 0, std::max<size_t>(t.view_.nbytes(), 1));
    return t;
}

}  // namespace di
