// The allow-list file (`--kernels FILE`, written by `deepinfer screen`):
//   {"backend": "cpu", "allow": [{"op": "linear", "variant": "cpu_simd"}, ...]}
// Fallbacks are always allowed whether listed or not; anything the file names must exist on the backend.
#pragma once

#include <string>

#include "core/error.h"
#include "ops/backend.h"

namespace di::runtime {

// Parses `text` against `backend`'s variants. One-line errors name the file and the entry: not JSON, another
// backend, an unknown op, a variant the op does not have.
Result<ops::AllowList> parse_kernels_file(const std::string& text, const std::string& source,
                                          const ops::Backend& backend);
// Reads `path` and applies it to `backend` (set_allow_list).
Status apply_kernels_file(const std::string& path, ops::Backend& backend);
// JSON text of `list` (one entry per allowed pair, fallbacks included, sorted).
std::string kernels_file_text(const ops::AllowList& list);

}  // namespace di::runtime
