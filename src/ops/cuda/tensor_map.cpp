#include "ops/cuda/tensor_map.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

namespace di::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            cudaGetLastError();  // (the lookup's error is not the caller's)
            return PFN_cuTensorMapEncodeTiled_v12000{};
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

}  // namespace

static_assert(sizeof(CUtensorMap) == kTensorMapBytes);

bool encode_byte_rows_map(void* map, const void* data, int64_t rows, int64_t row_bytes, int64_t ld,
                          int box_bytes, int box_rows) {
    const PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
    if (encode == nullptr || reinterpret_cast<uintptr_t>(data) % 16 != 0 || ld % 16 != 0 || box_bytes > 64 ||
        box_bytes % 16 != 0 || rows <= 0 || row_bytes < box_bytes || ld < row_bytes)
        return false;
    const cuuint64_t dims[2] = {cuuint64_t(row_bytes), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(ld)};
    const cuuint32_t box[2] = {cuuint32_t(box_bytes), cuuint32_t(box_rows)};
    const cuuint32_t steps[2] = {1, 1};
    CUtensorMap m;
    if (encode(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(data), dims, strides, box, steps,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
        return false;
    *static_cast<CUtensorMap*>(map) = m;
    return true;
}

}  // namespace di::cuda
