#include "ops/op_cases.h"

#include <cmath>

namespace di::ops::cases {
namespace {

// Each case's name says what it exercises; `use` who takes it (both tests where nothing is said).
constexpr LinearCase kLinear[] = {
    // odd sizes and every dense dtype
    {"tiny_f32_odd", 3, 40, 23, WeightFormat::kDense, DType::kF32, DType::kE8M0, 0, 0, 0,
     kCpuTest | kCudaTest | kScreen},
    {"one_row_bf16", 1, 256, 130, WeightFormat::kDense, DType::kBF16},
    {"f16_odd", 5, 70, 9, WeightFormat::kDense, DType::kF16, DType::kE8M0, 0, 0, 0, kCpuTest},
    {"empty_batch_bf16", 0, 64, 8, WeightFormat::kDense, DType::kBF16, DType::kE8M0, 0, 0, 0, kCpuTest},
    {"prefill_bf16_odd_rows", 37, 264, 70, WeightFormat::kDense, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCpuTest | kCudaTest | kScreen},
    {"demo_lm_head_bf16", 2, 256, 129280, WeightFormat::kDense, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCpuTest},
    {"f16_n5", 5, 512, 77, WeightFormat::kDense, DType::kF16, DType::kE8M0, 0, 0, 0, kCudaTest},
    {"f32_n8_strided", 8, 1024, 300, WeightFormat::kDense, DType::kF32, DType::kE8M0, 4, 0, 0, kCudaTest},
    {"f16_n1_k2048", 1, 2048, 100, WeightFormat::kDense, DType::kF16, DType::kE8M0, 0, 0, 0, kCudaTest},
    {"f32_n2_k1024_strided", 2, 1024, 50, WeightFormat::kDense, DType::kF32, DType::kE8M0, 4, 0, 0,
     kCudaTest},
    // V4-Flash's matrices: q_a (hidden -> q_lora), q_b (q_lora -> 64 x 512), the grouped o_a (one group's
    // columns of x [n, 8 x 4096] and of y, a group's rows of wo_a), o_b (o_groups x o_lora -> hidden), the
    // experts (fp4), kv and the head (bf16)
    {"q_a_fp8_decode", 1, 4096, 1024, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCpuTest | kCudaTest | kBench},
    {"q_a_fp8_rows", 6, 4096, 1024, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0, kCpuTest},
    {"q_a_fp8_n2", 2, 4096, 1024, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0, kCudaTest},
    {"q_b_fp8_prefill", 19, 1024, 64 * 512, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    {"q_b_fp8_n1", 1, 1024, 64 * 512, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest | kBench},
    {"q_b_fp8_n3", 3, 1024, 64 * 512, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    {"o_a_group_strided", 5, 4096, 1024, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 7 * 4096,
     7 * 1024, 1024, kCpuTest},
    {"o_a_group_strided_x", 5, 4096, 1024, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 7 * 4096, 0,
     0, kCudaTest},
    {"o_a_fp8_n1_strided_x", 1, 4096, 1024, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 7 * 4096, 0,
     0, kCudaTest},
    {"o_b_fp8", 3, 8 * 1024, 4096, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest | kBench},
    {"o_b_fp8_n2", 2, 8 * 1024, 4096, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    {"o_b_fp8_n4", 4, 8 * 1024, 4096, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    {"shared_w1_fp8", 1, 4096, 2048, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0, kBench},
    // batched decode: mma's blocks of four and two token groups (16 and 8 rows), and several blocks of four
    {"o_b_fp8_n16", 16, 8 * 1024, 4096, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    {"q_a_fp8_n8_strided_x", 8, 4096, 1024, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 4096, 0, 0,
     kCudaTest},
    {"shared_w1_fp8_n64", 64, 4096, 2048, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    {"kv_bf16_n16", 16, 4096, 512, WeightFormat::kDense, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest | kBench},
    {"head_bf16", 1, 4096, 129280, WeightFormat::kDense, DType::kBF16, DType::kE8M0, 0, 0, 0, kBench},
    {"head_like_bf16_n1_odd_out", 1, 4096, 12929, WeightFormat::kDense, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    {"head_like_bf16_n16", 16, 4096, 12928, WeightFormat::kDense, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    {"compressor_bf16_n64_strided_x", 64, 4096, 1024, WeightFormat::kDense, DType::kBF16, DType::kE8M0, 4, 0,
     0, kCudaTest},
    {"bf16_n5_small", 5, 264, 72, WeightFormat::kDense, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest | kScreen},
    {"expert_w1_fp4_decode", 1, 4096, 2048, WeightFormat::kFp4Group, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCpuTest | kCudaTest | kBench},
    {"expert_w2_fp4_rows", 3, 2048, 4096, WeightFormat::kFp4Group, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCpuTest | kBench},
    {"expert_w2_fp4_prefill", 20, 2048, 4096, WeightFormat::kFp4Group, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    {"expert_w2_fp4_n7", 7, 2048, 4096, WeightFormat::kFp4Group, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    {"expert_w2_fp4_n2", 2, 2048, 4096, WeightFormat::kFp4Group, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    // block scales: f32 scales, partial last blocks, one column, small K
    {"fp8_f32_scale_partial_block", 11, 200, 300, WeightFormat::kFp8Block, DType::kBF16, DType::kF32, 0, 0, 0,
     kCpuTest | kScreen},
    {"fp8_f32_scale_partial_block_k384", 11, 384, 300, WeightFormat::kFp8Block, DType::kBF16, DType::kF32, 0,
     0, 0, kCudaTest},
    {"fp8_one_column", 2, 1, 5, WeightFormat::kFp8Block, DType::kBF16, DType::kF32, 0, 0, 0,
     kCpuTest | kScreen},
    {"fp8_n1_small_k", 1, 128, 256, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0, kCudaTest},
    {"fp8_f32_scale_n2_k3072", 2, 3072, 300, WeightFormat::kFp8Block, DType::kBF16, DType::kF32, 0, 0, 0,
     kCudaTest},
    {"fp8_f32_scale_n1_k2048", 1, 2048, 300, WeightFormat::kFp8Block, DType::kBF16, DType::kF32, 0, 0, 0,
     kCudaTest},
    // mma: a partial last row block of f32 scales, three token groups (the last partial)
    {"fp8_f32_scale_n6_k3072_out320", 6, 3072, 320, WeightFormat::kFp8Block, DType::kBF16, DType::kF32, 0, 0,
     0, kCudaTest | kScreen},
    {"fp8_n9_k1024", 9, 1024, 256, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest | kScreen},
    {"fp4_f32_scale", 9, 96, 40, WeightFormat::kFp4Group, DType::kBF16, DType::kF32, 0, 0, 0, kCudaTest},
    {"fp4_f32_scale_odd", 9, 96, 41, WeightFormat::kFp4Group, DType::kBF16, DType::kF32, 0, 0, 0,
     kCpuTest | kScreen},
    {"fp4_partial_group", 4, 50, 7, WeightFormat::kFp4Group, DType::kBF16, DType::kE8M0, 3, 0, 2, kCpuTest},
    {"fp4_f32_scale_n2_k1024", 2, 1024, 64, WeightFormat::kFp4Group, DType::kBF16, DType::kF32, 0, 0, 0,
     kCudaTest},
    // a prefill's rows on CUDA's gemm: partial 32-token tiles, a partial 128-row scale block, f32 scales,
    // strided x and y
    {"fp8_prefill_rows", 300, 512, 320, WeightFormat::kFp8Block, DType::kBF16, DType::kE8M0, 0, 0, 0,
     kCudaTest},
    {"fp8_prefill_f32_scales_strided", 77, 256, 192, WeightFormat::kFp8Block, DType::kBF16, DType::kF32, 8, 4,
     0, kCudaTest},
};

// The experts of the V4-Flash cases are 256 FP4 matrices of 2048 x 4096 (~40 s to draw on the CPU once).
constexpr MoeCase kMoe[] = {
    {"demo_shape_fp4", 5, 256, 128, 16, 2, WeightFormat::kFp4Group, 10.0f, 3, DType::kE8M0, 0, false, false,
     kCpuTest},
    {"v4flash_fp4_two_tokens", 2, 4096, 2048, 256, 2, WeightFormat::kFp4Group, 10.0f, 2, DType::kE8M0, 0,
     false, false, kCpuTest},
    {"many_tokens_fp8_f32_scale", 33, 64, 48, 8, 3, WeightFormat::kFp8Block, 10.0f, 3, DType::kF32, 0, false,
     false, kCpuTest},
    {"bf16_tight_clamp_strided", 7, 96, 40, 6, 2, WeightFormat::kDense, 0.05f, 3, DType::kE8M0, 13, false,
     false, kCpuTest},
    {"fp4_no_clamp_repeat", 4, 64, 32, 4, 3, WeightFormat::kFp4Group, INFINITY, 4, DType::kE8M0, 0, true,
     false, kCpuTest},
    {"one_token_odd_fp8", 1, 200, 136, 3, 1, WeightFormat::kFp8Block, 10.0f, 3, DType::kE8M0, 0, false, false,
     kCpuTest},
    {"empty_batch", 0, 64, 32, 4, 2, WeightFormat::kFp4Group, 10.0f, 3, DType::kE8M0, 0, false, false,
     kCpuTest},
    // V4-Flash's experts (256 FP4 2048 x 4096, top-6) at 1, 2 and 8 tokens
    {"flash_fp4_256_experts", 2, 4096, 2048, 256, 6, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0,
     false, false, kCudaTest},
    {"flash_fp4_one_token", 1, 4096, 2048, 256, 6, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest | kBench},
    {"flash_fp4_batch_8", 8, 4096, 2048, 256, 6, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest},
    {"fp4_shared_experts_9_tokens_each", 18, 512, 256, 4, 2, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0,
     0, false, false, kCudaTest},
    {"fp8_experts", 5, 256, 256, 8, 2, WeightFormat::kFp8Block, 10.0f, 0, DType::kE8M0, 0, false, false,
     kCudaTest},
    {"dense_odd", 9, 65, 40, 4, 2, WeightFormat::kDense, 10.0f, 0, DType::kE8M0, 0, false, false, kCudaTest},
    // split_rows' shapes (hidden and moe_dim multiples of 1024): several pairs per expert (two-pair passes
    // and a one-pair remainder), fp8 experts, one token with fp8
    {"fp4_split_shared_experts", 7, 1024, 2048, 4, 2, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0,
     false, false, kCudaTest},
    {"fp8_split_experts", 3, 2048, 1024, 8, 2, WeightFormat::kFp8Block, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest},
    {"fp8_split_one_token", 1, 1024, 1024, 8, 3, WeightFormat::kFp8Block, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest},
    // more than 1024 (token, slot) pairs: the CUDA backend runs chunks of 512 tokens (k = 2)
    {"fp8_chunks_of_512_tokens", 700, 256, 256, 8, 2, WeightFormat::kFp8Block, 10.0f, 0, DType::kE8M0, 0,
     false, false, kCudaTest},
    {"fp4_split_chunks", 520, 1024, 1024, 8, 2, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest},
    // a prefill's chunk on CUDA's gemm: partial 32-token tiles of 8 experts, 16 experts with 72 tokens each
    // at k = 6, and 36000 pairs (chunks of 16384 + 1616 tokens)
    {"fp4_gemm_token_tiles", 300, 512, 256, 8, 2, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest},
    {"fp4_gemm_16_experts", 192, 512, 256, 16, 6, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest},
    {"fp4_gemm_chunks", 18000, 128, 128, 8, 2, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest},
    // native precision's quantised activations: one token (mma's two launches), mma's token passes, gemm
    {"native_fp4_one_token", 1, 512, 256, 16, 6, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest, true},
    {"native_fp4_16_experts", 192, 512, 256, 16, 6, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest, true},
    // a decode step of long K: 33 and 9 chunks of 128 (the decode kernels' warps hold unequal chunk counts)
    {"native_fp4_decode_long_k", 2, 4224, 1152, 8, 6, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0,
     false, false, kCudaTest, true},
    // w4a8: three token tiles (the last of two rows) per expert, odd chunk counts (5 and 3), from 2048 pairs
    {"native_fp4_w4a8_tiles", 260, 640, 384, 16, 8, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest, true},
    // the same with exact up sums: w4a8 within the f32 variants' tolerance
    {"native_fp4_w4a8_exact_sums", 260, 640, 384, 16, 8, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0,
     false, false, kCudaTest, true, true},
    // the same with scales that fold a chunk at a time only
    {"native_fp4_w4a8_chunk_scales", 260, 640, 384, 16, 8, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0,
     false, false, kCudaTest, true, false, true},
    // group scales up to 2^39 apart within a chunk: w4a8 must not take them
    {"native_fp4_wide_scales", 300, 256, 128, 16, 8, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0,
     false, true, kCudaTest, true},
    {"native_fp8_experts", 40, 256, 256, 8, 2, WeightFormat::kFp8Block, 10.0f, 0, DType::kE8M0, 0, false,
     false, kCudaTest, true},
    // CUDA's dispatch must not give these to mma
    {"fp4_wide_scales", 3, 256, 128, 4, 2, WeightFormat::kFp4Group, 10.0f, 0, DType::kE8M0, 0, false, true,
     kCudaTest},
};

constexpr AttentionCase kAttention[] = {
    {"decode_full_ring", 1, 4, 64, 8, 20, 7, CompMask::kNone, 0, 1, 0, kCpuTest},
    {"prefill_longer_than_window", 13, 3, 32, 5, 0, 0, CompMask::kNone, 0, 1, 0, kCpuTest},
    {"partial_ring_chunk", 4, 2, 48, 16, 6, 6, CompMask::kNone, 0, 1, 0, kCpuTest},
    {"hca_causal_rate4", 9, 4, 40, 6, 11, 5, CompMask::kCausal, 5, 4, 0, kCpuTest | kScreen},
    {"csa_picks_dup_and_none", 6, 2, 64, 4, 30, 3, CompMask::kPicks, 9, 4, 7, kCpuTest | kScreen},
    {"one_head_odd_dim", 3, 1, 37, 3, 2, 2, CompMask::kNone, 0, 1, 0, kCpuTest},
    {"v4flash_decode_picks", 1, 64, 512, 128, 4000, 127, CompMask::kPicks, 1000, 4, 512, kCpuTest},
    // V4-Flash's decode (64 heads x 512, window 128): sliding, HCA, CSA picks
    {"decode_sliding_flash", 1, 64, 512, 128, 1000, 127, CompMask::kNone, 0, 1, 0, kCudaTest},
    {"prefill_from_zero", 37, 4, 128, 8, 0, 0, CompMask::kNone, 0, 1, 0, kCudaTest},
    {"decode_hca_flash", 3, 64, 512, 128, 500, 127, CompMask::kCausal, 4, 128, 0, kCudaTest},
    {"prefill_hca_small_rate", 40, 4, 128, 8, 10, 7, CompMask::kCausal, 12, 4, 0, kCudaTest | kScreen},
    {"decode_csa_picks_flash", 2, 64, 512, 128, 4000, 127, CompMask::kPicks, 1000, 4, 512, kCudaTest},
    {"odd_head_dim_partial_ring", 3, 3, 96, 5, 2, 2, CompMask::kPicks, 9, 4, 6, kCudaTest | kScreen},
    // split_kv takes S > 1 ranges here: duplicate picks across ranges, and a long HCA context
    {"decode_picks_split_small", 1, 4, 64, 16, 300, 15, CompMask::kPicks, 50, 4, 40, kCudaTest | kScreen},
    {"decode_head_dim_30_fallback_only", 1, 5, 30, 8, 40, 7, CompMask::kPicks, 10, 4, 5, kCudaTest},
    {"decode_hca_flash_64k", 1, 64, 512, 128, 70000, 127, CompMask::kCausal, 546, 128, 0, kCudaTest},
    // prefill chunks of V4-Flash's shape (the mma variant): behind a full ring, CSA picks with -1s and
    // duplicates, HCA from position 0 past the first entry
    {"prefill_sliding_flash", 80, 64, 512, 128, 300, 127, CompMask::kNone, 0, 1, 0, kCudaTest},
    {"prefill_csa_picks_flash", 16, 64, 512, 128, 2000, 127, CompMask::kPicks, 600, 4, 512, kCudaTest},
    {"prefill_hca_flash_from_zero", 150, 64, 512, 128, 0, 0, CompMask::kCausal, 2, 128, 0, kCudaTest},
};

constexpr IndexerCase kIndexer[] = {
    {"v4flash_decode", 1, 64, 128, 2048, 512, 4 * 2048 - 1, 4, IndexerKeys::kRandom, 0.0f, kCpuTest},
    {"prefill_causal_cutoff", 9, 4, 32, 12, 5, 30, 4, IndexerKeys::kRandom, 0.0f, kCpuTest},
    {"k_above_visible", 9, 3, 16, 3, 3, 0, 4, IndexerKeys::kRandom, 0.0f, kCpuTest},
    {"k_equals_T", 2, 5, 24, 17, 17, 100, 4, IndexerKeys::kRandom, 0.0f, kCpuTest},
    {"exact_ties_mixed_sign", 4, 6, 40, 64, 20, 400, 4, IndexerKeys::kTies, -1.0f, kCpuTest},
    {"near_ties", 3, 8, 64, 256, 64, 2000, 4, IndexerKeys::kNearTies, 0.0f, kCpuTest},
    {"near_ties_mixed_sign", 2, 8, 64, 300, 100, 2000, 4, IndexerKeys::kNearTies, -0.5f, kCpuTest},
    // V4-Flash's indexer (64 heads x 128, top-512) at decode, a short prompt (k = T: no select), a 64K
    // context and a prefill chunk cut by causality
    {"flash_decode_top512", 1, 64, 128, 3000, 512, 12003, 4, IndexerKeys::kRandom, 0.0f, kCudaTest},
    {"flash_decode_short_all_picked", 1, 64, 128, 5, 5, 20, 4, IndexerKeys::kRandom, 0.0f, kCudaTest},
    {"flash_decode_64k_context", 1, 64, 128, 16384, 512, 65540, 4, IndexerKeys::kRandom, 0.0f, kCudaTest},
    {"flash_prefill_causal_cut", 6, 64, 128, 700, 512, 2790, 4, IndexerKeys::kRandom, 0.0f, kCudaTest},
    // a prefill chunk from position 0: most queries see few entries (the tensor-core scores skip whole tiles)
    {"flash_prefill_from_zero", 300, 64, 128, 75, 64, 0, 4, IndexerKeys::kRandom, 0.0f, kCudaTest},
    {"ties_at_zero", 5, 8, 64, 300, 40, 1200, 4, IndexerKeys::kManyZeroScores, 0.0f, kCudaTest},
    {"k_equals_T_with_fillers", 9, 4, 32, 10, 10, 20, 4, IndexerKeys::kRandom, 0.0f, kCudaTest},
    {"odd_dims", 3, 3, 20, 37, 7, 150, 4, IndexerKeys::kRandom, 0.0f, kCudaTest},
    // more heads than tiled's 64-head pass and a dim that is not a multiple of its 32-dim stage
    {"many_heads_odd_dim", 2, 80, 36, 150, 40, 700, 4, IndexerKeys::kRandom, 0.0f, kCudaTest},
};

constexpr CompressCase kCompress[] = {
    {"hca_flash_prefill", 300, 512, 128, 100, false},
    {"hca_decode_closing", 1, 512, 128, 127, false},
    {"hca_decode_open", 1, 512, 128, 3, false},
    {"csa_flash_decode_closing", 1, 512, 4, 7, true},  // first window of the call: overlap from state
    {"csa_flash_decode_open", 1, 512, 4, 9, true},
    {"csa_prefill_from_zero", 37, 512, 4, 0, true},  // w = 0: empty overlap half
    {"indexer_prefill_mid", 23, 128, 4, 5, true},
    {"odd_small", 7, 5, 3, 2, true},
};

constexpr MhcCase kMhc[] = {
    {"v4flash_decode", 1, 4, 4096, 1e-6f, 20, kCpuTest | kCudaTest},
    {"demo_prefill", 9, 4, 256, 1e-6f, 20, kCpuTest},
    {"odd_width_hc2", 3, 2, 37, 1e-2f, 3, kCpuTest},
    {"one_iter", 2, 3, 64, 1e-6f, 1, kCpuTest},
    // V4-Flash's width at 3 and 9 tokens, a width split_k's float4 reads take, and one they do not
    {"v4flash_3_tokens", 3, 4, 4096, 1e-6f, 20, kCudaTest},
    {"v4flash_9_tokens", 9, 4, 4096, 1e-6f, 20, kCudaTest},
    {"width_100", 2, 4, 100, 1e-6f, 20, kCudaTest},
    // a prefill's chunk (CUDA: the sums on the FP64 tensor cores from 2,048 tokens), 8 tokens of a last block
    {"v4flash_prefill", 2056, 4, 4096, 1e-6f, 20, kCudaTest},
    {"hc2_width_7", 5, 2, 7, 1e-6f, 20, kCudaTest},
};

template <class Case>
std::vector<Case> taken_by(std::span<const Case> all, Use use) {
    std::vector<Case> v;
    for (const Case& c : all)
        if (c.use & use) v.push_back(c);
    return v;
}

}  // namespace

std::span<const LinearCase> linear_cases() { return kLinear; }
std::span<const MoeCase> moe_cases() { return kMoe; }
std::vector<MoeCase> moe_cases(Use use) { return taken_by<MoeCase>(kMoe, use); }
std::span<const AttentionCase> attention_cases() { return kAttention; }
std::vector<AttentionCase> attention_cases(Use use) { return taken_by<AttentionCase>(kAttention, use); }
std::span<const IndexerCase> indexer_cases() { return kIndexer; }
std::vector<IndexerCase> indexer_cases(Use use) { return taken_by<IndexerCase>(kIndexer, use); }
std::span<const CompressCase> compress_cases() { return kCompress; }
std::vector<CompressCase> compress_cases(Use use) { return taken_by<CompressCase>(kCompress, use); }
std::span<const MhcCase> mhc_cases() { return kMhc; }
std::vector<MhcCase> mhc_cases(Use use) { return taken_by<MhcCase>(kMhc, use); }

std::vector<LinearCase> linear_cases(Use use) { return taken_by<LinearCase>(kLinear, use); }

}  // namespace di::ops::cases
