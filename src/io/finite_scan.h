// Scans tensor data for NaN and infinity (`--check-weights`): one pass over the mapped bytes of every
// float tensor (F32, BF16, F16, F8_E4M3 whose NaN is 0x7f/0xff, F8_E8M0 whose NaN is 0xff). Packed FP4
// and integer tensors cannot hold a non-finite value.
#pragma once

#include "core/error.h"
#include "io/safetensors.h"

namespace di::io {

// kFormat "<file>: tensor '<name>' holds nan at flat index 17" for the first non-finite value.
Status check_tensor_finite(const TensorEntry& e);
// Every tensor of the checkpoint, in name order; the first bad one is the error.
Status check_checkpoint_finite(const Checkpoint& ck);

}  // namespace di::io
