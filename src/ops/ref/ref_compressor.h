// The reference compressor in two parts, so that a backend may run the entries in parallel with the
// reference's bits (the cpu backend does): compress_entries computes channels [c0, c1) of entry e (row e of
// a.out) from the chunk and the state as the call found it; compress_store_state then writes the state the
// chunk leaves. RefBackend::compress is every entry, then the state.
#pragma once

#include "ops/compressor.h"

namespace di::ops {

void compress_entries(const CompressArgs& a, int64_t e, int64_t c0, int64_t c1);
void compress_store_state(const CompressArgs& a);

}  // namespace di::ops
