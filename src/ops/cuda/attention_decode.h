// A decode batch's queries on the warpgroup tensor cores (attention_wgp.cu's block, a query and 64 heads,
// native precision): every job's key rows converted to f16 in one launch, then one block a job and 64
// heads in another, the jobs' calls read from a table. split_kv (attention.cu) spreads one query's keys over
// many blocks, which a batch of a few queries needs to fill the GPU; from kAttentionDecodeWgpMinJobs decode
// jobs in one call the batch fills it by itself, and its f32 CUDA-core products (~5 TFLOP/s at batch 256)
// give way to the tensor cores. The two give different bits, so a decode query's output depends on whether
// its step held that many decode jobs (docs/cuda.md lists it among the batch-dependent choices).
#pragma once

#include <cstdint>

#include "ops/cuda/kernels.h"

namespace di::cuda {

// H100, 4 V4-Flash layers, context 4,096 (docs/benchmarks.md): split_kv against the batch, ms a step, at
// batch 1 1.3 / 1.4, 4 2.2 / 2.2, 8 2.7 / 2.6, 16 3.4 / 3.2, 64 6.7 / 5.4, 256 16.9 / 11.8.
inline constexpr int64_t kAttentionDecodeWgpMinJobs = 8;

// Whether the batched kernel takes the call (one query; f16; no prepared queries or quantised output). A job
// with picks has only the entries it reads converted (a first launch lists them), so its conversion does not
// grow with the context.
bool attention_decode_wgp_takes(const AttentionParams& p);
// The calls (each taken) in one conversion launch and one attention launch, after one that lists the picked
// entries where a job has picks (scratch slot 4).
void launch_attention_decode_wgp(const AttentionParams* ps, int64_t count, Scratch& scratch, Stream s);
// The fewest decode jobs a call sends there (DEEPINFER_ATTN_DECODE_WGP_MIN, default the constant; a very
// large value keeps split_kv); the setter returns the value it replaces. Launches so far (tests).
int64_t set_attention_decode_wgp_min(int64_t jobs);
int64_t attention_decode_wgp_min();
int64_t attention_decode_wgp_launches();

}  // namespace di::cuda
