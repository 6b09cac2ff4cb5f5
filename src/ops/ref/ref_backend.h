// The reference backend: the executable spec. Plain loops over the maths of each ops/*.h header,
// accumulating in double. Never optimised; fast backends are checked against it.
#pragma once

#include <memory>

#include "ops/backend.h"

namespace di::ops {

std::unique_ptr<Backend> make_ref_backend();

}  // namespace di::ops
