#include "ops/op_cases_rows.h"

namespace di::ops::cases {
namespace {

constexpr EmbedCase kEmbed[] = {
    {"bf16_table", DType::kBF16, 1000, 4096, 7},
    {"f32_table", DType::kF32, 1000, 4096, 7},
};

constexpr ElementwiseCase kElementwise[] = {
    {"one_odd_row", 1, 5},
    {"moe_dim", 7, 2048},
    {"hidden", 33, 4096},
};

// a row of the hidden size, q's heads, q_lora's rows (a block a row), an odd width; a warp a row from 512
// down, with four rows a warp from 4,096 rows (the last warp's rows partly past n)
constexpr NormCase kNorm[] = {
    {"hidden_bf16", 1, 4096, DType::kBF16, true},
    {"q_heads_unweighted", 7 * 64, 512, DType::kF32, false},
    {"q_lora", 5, 1024, DType::kF32, true},
    {"odd_width", 3, 77, DType::kBF16, true},
    {"four_rows_a_warp", 4101, 128, DType::kBF16, true},
    {"narrow", 9, 20, DType::kF32, true},
};

// 64 heads (a thread rotates a pair in eight heads), 12 (groups of eight and four), one head
constexpr RopeCase kRope[] = {
    {"q_heads", 3, 64, 512, 64, 1.0f, false},
    {"q_heads_inverse", 2, 64, 512, 64, 1.0f, true},
    {"one_small_head", 4, 1, 10, 4, 1.3f, false},
    {"indexer_q", 1, 64, 128, 64, 1.0f, false},
    {"twelve_heads_inverse", 5, 12, 128, 32, 1.1f, true},
};

constexpr WindowStoreCase kWindowStore[] = {
    {"decode_chunk", 5, 127, 512, 300},
    {"prefill_wraps", 200, 127, 512, 0},
    {"small_ring", 1, 7, 128, 6},
    {"odd_width", 9, 3, 33, 2},
};

constexpr RouteCase kRoute[] = {
    {"flash_sqrt_softplus_bias", 5, 256, 6, ScoreFunc::kSqrtSoftplus, true, false, false, false},
    {"sigmoid_no_bias", 3, 64, 4, ScoreFunc::kSigmoid, false, false, false, false},
    {"ties_lower_id_first", 4, 256, 6, ScoreFunc::kSqrtSoftplus, false, false, false, true},
    {"hash_i64", 6, 256, 6, ScoreFunc::kSqrtSoftplus, false, true, true, false},
    {"hash_i32_one_token", 1, 16, 2, ScoreFunc::kSigmoid, false, true, false, false},
};

}  // namespace

std::span<const RouteCase> route_cases() { return kRoute; }
std::span<const EmbedCase> embed_cases() { return kEmbed; }
std::span<const ElementwiseCase> elementwise_cases() { return kElementwise; }
std::span<const NormCase> norm_cases() { return kNorm; }
std::span<const RopeCase> rope_cases() { return kRope; }
std::span<const WindowStoreCase> window_store_cases() { return kWindowStore; }

}  // namespace di::ops::cases
