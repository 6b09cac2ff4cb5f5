// The key rows of a native-precision prefill chunk as f16 (attention_mma64.cu converts them once a call; its
// kernel and attention_wg.cu's read them): [ring rows (when the chunk reaches back into the ring), the
// chunk's L rows, the n_comp entries] x 512 halves, each row with its own power-of-two shift.
#pragma once

#include <cuda_fp16.h>

#include "ops/cuda/kernels.h"
#include "ops/cuda/mma_frag.cuh"
#include "ops/cuda/wgmma.cuh"

namespace di::cuda {

inline constexpr int kKeyRowHalves = 512;  // head_dim: the only one these kernels take

struct F16Rows {
    __half* rows;
    int* shift;
    int64_t ring_rows;
    // A decode batch's job with picks: its entry rows are only the entries it reads, in the order of
    // query_keys' list (each valid pick's first occurrence, in pick order), so its entry slot c is row c of
    // them; picked[c] names the entry (-1 past the last). Null: every entry, in entry order.
    int32_t* picked = nullptr;
};

// A decode batch's job (attention_decode.h): its call, its rows, and its rows' count and first block of the
// batched conversion.
struct AttentionF16Job {
    AttentionParams p;
    F16Rows r;
    int64_t total, block0;
};

// Key slot j of a query (window slots j < n_win, then the entries: list holds the picks) -> its row.
__device__ __forceinline__ int64_t f16_row(const AttentionParams& p, const F16Rows& r, int64_t j, int64_t lo,
                                           int64_t n_win, const int32_t* list) {
    if (j < n_win) {
        const int64_t pp = lo + j;
        return pp < p.pos0 ? pp % (p.window - 1) : r.ring_rows + (pp - p.pos0);
    }
    const int64_t c = j - n_win;
    return r.ring_rows + p.L +
           (p.comp_mask == AttnCompMask::kCausal || r.picked != nullptr ? c : int64_t(list[c]));
}

// Key slot j's 16-byte unit `unit` copied to shared address dst (cp.async), zeros past the last key (so that
// a probability of 0 meets 0, never NaN).
__device__ __forceinline__ void copy_key_unit(const AttentionParams& p, const F16Rows& r, int64_t j,
                                              int64_t n_keys, int64_t lo, int64_t n_win, const int32_t* list,
                                              int unit, uint32_t dst) {
    const bool valid = j < n_keys;
    const __half* src = r.rows;  // mapped, not read, where !valid
    if (valid) src = r.rows + f16_row(p, r, j, lo, n_win, list) * kKeyRowHalves + unit * 8;
    wg::cp_async16(dst, src, valid);
}

// Key slot j's shift, kEmptyRowShift past the last key (never a tile's smallest).
__device__ __forceinline__ int key_shift(const AttentionParams& p, const F16Rows& r, int64_t j,
                                         int64_t n_keys, int64_t lo, int64_t n_win, const int32_t* list) {
    return j < n_keys ? r.shift[f16_row(p, r, j, lo, n_win, list)] : mma::kEmptyRowShift;
}

// attention_wg.cu: the mma64 variant's queries on the warpgroup tensor cores (set_attention_wgmma), after
// the rows' conversion; whether it takes the call's shared memory.
bool attention_wg_fits(const AttentionParams& p);
void launch_attention_wg(const AttentionParams& p, const F16Rows& r, cudaStream_t s);
// attention_wgp.cu: the same queries by a producer warpgroup and two consumers (set_attention_wgmma(2), the
// default).
bool attention_wgp_fits(const AttentionParams& p);
void launch_attention_wgp(const AttentionParams& p, const F16Rows& r, cudaStream_t s);
// The jobs of a decode batch (one query each; dev the device copy of host) in one launch.
void launch_attention_wgp_batch(const AttentionF16Job* dev, const AttentionF16Job* host, int64_t count,
                                cudaStream_t s);

}  // namespace di::cuda
