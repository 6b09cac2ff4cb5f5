// CudaBackend: memory, stream and weight-format helpers; the op methods are in cuda_ops.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/env_switch.h"
#include "ops/cuda/fp8_gemm.h"

namespace di::ops {
namespace cuda_impl {

Fdt fdt(DType t, std::string_view what) {
    switch (t) {
        case DType::kF32:
            return Fdt::kF32;
        case DType::kBF16:
            return Fdt::kBF16;
        case DType::kF16:
            return Fdt::kF16;
        default:
            DI_CHECK(false, "{}: dtype {} is not a float type", what, dtype_name(t));
    }
    return Fdt::kF32;
}

void on_device(const TensorView& v, std::string_view what) {
    DI_CHECK(v.empty() || v.device == Device::kCuda, "{}: view {} is not on the CUDA device", what,
             v.describe());
}

WeightRef weight_ref(const QWeight& w, std::string_view what) {
    on_device(w.data, what);
    on_device(w.scale, what);
    WeightRef r;
    r.data = w.data.data;
    r.ld = w.data.stride[0];
    r.out_dim = w.out_dim;
    r.in_dim = w.in_dim;
    DI_CHECK(w.data.ndim == 2 && w.data.stride[1] == 1, "{}: weight data {} needs unit last stride", what,
             w.data.describe());
    switch (w.format) {
        case WeightFormat::kDense:
            r.format = 0;
            r.dense_dt = fdt(w.data.dtype, what);
            return r;
        case WeightFormat::kFp8Block:
            r.format = 1;
            DI_CHECK(w.data.dtype == DType::kF8E4M3, "{}: fp8 weight dtype {}", what,
                     dtype_name(w.data.dtype));
            break;
        case WeightFormat::kFp4Group:
            r.format = 2;
            DI_CHECK(w.data.dtype == DType::kFP4x2, "{}: fp4 weight dtype {}", what,
                     dtype_name(w.data.dtype));
            break;
    }
    DI_CHECK(w.scale.ndim == 2 && w.scale.stride[1] == 1, "{}: scale {} needs unit last stride", what,
             w.scale.describe());
    DI_CHECK(w.scale.dtype == DType::kE8M0 || w.scale.dtype == DType::kF32, "{}: scale dtype {}", what,
             dtype_name(w.scale.dtype));
    r.scale = w.scale.data;
    r.ld_scale = w.scale.stride[0];
    r.scale_e8m0 = w.scale.dtype == DType::kE8M0;
    return r;
}

void CudaBackend::copy_many(std::span<const CopyPair> pairs) {
    const bool host = std::any_of(pairs.begin(), pairs.end(), [](const CopyPair& p) {
        return p.dst.device == Device::kHost || p.src.device == Device::kHost;
    });
    if (host || pairs.size() < 2) {  // through the host, or one copy: copy's own path
        for (const CopyPair& p : pairs) copy(p.dst, p.src);
        return;
    }
    if (replaying()) return;
    std::vector<cuda::CopyJob> jobs;
    jobs.reserve(pairs.size());
    for (const CopyPair& p : pairs) {
        DI_CHECK(p.dst.is_contiguous() && p.src.is_contiguous() && p.dst.nbytes() == p.src.nbytes(),
                 "copy {} <- {}", p.dst.describe(), p.src.describe());
        if (p.dst.nbytes() > 0) jobs.push_back({p.dst.data, p.src.data, int64_t(p.dst.nbytes())});
    }
    cuda::launch_copies(jobs.data(), int64_t(jobs.size()), stream());
}

std::optional<Backend::BoundScales> CudaBackend::fp8_block_scales(const TensorView& scale) {
    static const bool on = cuda::env_switch("DEEPINFER_FP8_SCALES_AT_BIND", true);
    if (!on || scale.empty()) return std::nullopt;
    on_device(scale, "fp8 block scales");
    DI_CHECK(scale.ndim == 2 && scale.stride[1] == 1 &&
                 (scale.dtype == DType::kE8M0 || scale.dtype == DType::kF32),
             "fp8 block scales {}: expected [rows, cols] e8m0 or f32 with unit last stride",
             scale.describe());
    const int64_t rows = scale.shape[0], cols = scale.shape[1], ld = cuda::lt_scale_ld(cols);
    if (scale.dtype == DType::kF32 && scale.stride[0] == ld &&
        reinterpret_cast<uintptr_t>(scale.data) % 16 == 0)
        return std::nullopt;  // already the form
    BoundScales b{Tensor(alloc_, DType::kF32, {rows * ld}), {}};
    fill_zero(b.storage.view());  // the rows' padding
    cuda::launch_scales_to_f32(scale.data, scale.dtype == DType::kE8M0, scale.stride[0], rows, cols,
                               static_cast<float*>(b.storage.view().data), ld, stream_);
    b.view = scale;
    b.view.data = b.storage.view().data;
    b.view.dtype = DType::kF32;
    b.view.stride[0] = ld;
    synchronize();  // the caller may free `scale` next
    return b;
}

}  // namespace cuda_impl

std::unique_ptr<Backend> make_cuda_backend(int device) {
    return std::make_unique<cuda_impl::CudaBackend>(device);
}

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

}  // namespace di::ops
