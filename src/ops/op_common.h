// Shared vocabulary of the op catalogue: how an Args struct exposes its views (for checking, compare mode
// and tests) and the small checks every op uses.
#pragma once

#include <string_view>

#include "core/check.h"
#include "core/tensor.h"

namespace di::ops {

enum class Role : uint8_t { kIn, kOut, kInOut };

// visit(f) on an Args calls f(name, view, role) for every tensor field; empty optional views are skipped
// by the consumers.
#define DI_VISIT(f, field, role) f(#field, field, role)

inline void check_dtype(const TensorView& v, DType t, std::string_view what) {
    DI_CHECK(v.dtype == t, "{}: dtype {} expected {}", what, dtype_name(v.dtype), dtype_name(t));
}
inline void check_rows(const TensorView& v, int ndim, std::string_view what) {
    DI_CHECK(v.ndim == ndim && v.stride[v.ndim - 1] == 1, "{}: expected {}-d with unit last stride, got {}",
             what, ndim, v.describe());
}

}  // namespace di::ops
