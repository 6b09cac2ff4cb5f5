// The attention benchmarks of cuda_kernel_bench (cuda_attention_bench.cpp), on V4-Flash's shape.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda_bench_util.h"

namespace di::bench {

// Decode attention of one query over `entries` compressed entries: every entry (HCA, causal) or top-512
// picks (CSA). Bytes: the keys read once + q + out.
void bench_attention(std::vector<Row>& rows, cudaStream_t s, const char* name, cuda::AttnCompMask mask,
                     int64_t entries);
// A prompt's attention from position 0 in one chunk of L queries, the native precision's f16 operands:
// sliding only, HCA (rate 128, every entry so far) or CSA (rate 4, up to 512 distinct picks of the entries so
// far, -1 past them). FLOPs: 4 x 64 x 512 x the keys each query sees (scores and output). mma64 with and
// without the warpgroup kernel (set_attention_wgmma), and mma.
void bench_attention_prefill(std::vector<GemmRow>& rows, cudaStream_t s, const char* name,
                             cuda::AttnCompMask mask, int64_t L);

}  // namespace di::bench
