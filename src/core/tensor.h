// TensorView: a non-owning strided view (PyTorch order: outermost first, strides in elements).
// Tensor: owns memory from an Allocator (host or device) and hands out views.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace di {

enum class Device : uint8_t { kHost, kCuda };

inline constexpr int kMaxDims = 4;

struct TensorView {
    void* data = nullptr;
    DType dtype = DType::kF32;
    Device device = Device::kHost;
    int ndim = 0;
    std::array<int64_t, kMaxDims> shape{};
    std::array<int64_t, kMaxDims> stride{};  // in elements (for kFP4x2: in bytes)

    static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                 Device device = Device::kHost);
    bool empty() const { return data == nullptr; }
    int64_t numel() const;
    int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
    bool is_contiguous() const;
    size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }  // contiguous views only
    // Bytes from the first element to one past the last (a strided view's whole span; nbytes() when
    // contiguous).
    size_t span_bytes() const;

    template <typename T>
    T* ptr() const {
        return static_cast<T*>(data);
    }
    // Pointer to element (i0, i1, ...) of the leading dims.
    template <typename T>
    T* at(int64_t i0, int64_t i1 = 0, int64_t i2 = 0) const {
        return static_cast<T*>(data) + i0 * stride[0] + (ndim > 1 ? i1 * stride[1] : 0) +
               (ndim > 2 ? i2 * stride[2] : 0);
    }
    // Rows [begin, begin + n) of dim 0.
    TensorView rows(int64_t begin, int64_t n) const;
    // Same memory, new contiguous shape (requires a contiguous view).
    TensorView reshape(std::initializer_list<int64_t> new_shape) const;
    std::string describe() const;  // "f32[3, 4]"
};

class Allocator {
  public:
    virtual ~Allocator() = default;
    virtual void* allocate(size_t bytes) = 0;
    virtual void deallocate(void* p) = 0;
    virtual Device device() const = 0;
};

Allocator& host_allocator();

class Tensor {
  public:
    Tensor() = default;
    Tensor(Allocator& alloc, DType dtype, std::initializer_list<int64_t> shape);
    static Tensor zeros_host(DType dtype, std::initializer_list<int64_t> shape);
    const TensorView& view() const { return view_; }
    operator const TensorView&() const { return view_; }  // NOLINT: tensors pass as views
    bool empty() const { return view_.data == nullptr; }

  private:
    struct Free {
        Allocator* alloc;
        void operator()(void* p) const {
            if (p) alloc->deallocate(p);
        }
    };
    std::unique_ptr<void, Free> mem_{nullptr, Free{nullptr}};
    TensorView view_;
};

}  // namespace di
