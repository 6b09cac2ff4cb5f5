// Launchers of the CUDA kernels, with plain-old-data parameters. This header is shared by the host code
// (.cpp, which fills the params from the ops Args) and the device code (.cu, which must not include core/
// or ops/ headers: nvcc rejects fmt's consteval format strings). Strides are in elements, last dim unit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace di::cuda {

using Stream = void*;  // cudaStream_t

// Float element types of small inputs (tables, norm weights).
enum class Fdt : uint8_t { kF32, kBF16, kF16 };

// Device scratch memory handed to launchers that need temporaries; grows, never shrinks.
inline constexpr int kScratchSlots = 18;  // Scratch::get's slots 0 .. 17
class Scratch {
  public:
    virtual ~Scratch() = default;
    // A buffer of at least `bytes` for slot `slot` (0..17), valid until the next get of the same slot.
    // Slots: 0 indexer, 1-3 moe, 3 mhc, 4-5 attention, 6 dequantised fp8 activations, 7 the cuBLASLt
    // variants' temporaries (fp8 weight scales and outputs; bf16x3 pieces and products), 8 activation chunks
    // of the mma variants (moe, linear), 9 window_stores' job table, 10 launch_compresses' job table, 11
    // launch_indexer_topks' job table, 12 launch_rms_norm_ropes' job table, 13 the indexer's f16 keys (kMma),
    // 14 the fp8 GEMMs' quantised inputs, 15 moe_w4a8's tile-ordered rows (the bulk-copy kernel), 16 a
    // pre-quantised linear input back in f32 (for the kernels that do not read the codes), 17 a bf16-output
    // linear's f32 result before its cast.
    virtual void* get(int slot, size_t bytes) = 0;
};

// A weight matrix [out, in] in its checkpoint format (see ops/linear.h).
struct WeightRef {
    const void* data = nullptr;   // dense f32/bf16/f16, fp8 e4m3 bytes, or fp4 pairs
    const void* scale = nullptr;  // fp8 [ceil(out/128), ld_scale]; fp4 [out, ld_scale]; e8m0 bytes or f32
    int64_t ld = 0;               // row stride of data: elements (dense, fp8) or bytes (fp4)
    int64_t ld_scale = 0;         // row stride of scale in elements
    int64_t out_dim = 0, in_dim = 0;
    uint8_t format = 0;  // 0 dense, 1 fp8 block, 2 fp4 group
    Fdt dense_dt = Fdt::kF32;
    bool scale_e8m0 = true;
};

void launch_embed(const int32_t* tokens, int64_t n, const void* table, Fdt dt, int64_t ld_table,
                  int64_t vocab, int64_t dim, void* out, Fdt odt, int64_t ld_out, Stream s);
// out = x converted (f32 or bf16 each; bf16 rounded to nearest even), rows of d elements.
void launch_cast(const void* x, Fdt xdt, int64_t ld_x, void* out, Fdt odt, int64_t ld_out, int64_t n,
                 int64_t d, Stream s);
void launch_add(const float* a, int64_t lda, const float* b, int64_t ldb, float* out, int64_t ldo, int64_t n,
                int64_t d, Stream s);
void launch_swiglu(const float* g, int64_t ldg, const float* u, int64_t ldu, float* out, int64_t ldo,
                   int64_t n, int64_t d, float limit, Stream s);
void launch_rms_norm(const float* x, int64_t ldx, const void* w, Fdt wdt, float* y, int64_t ldy, int64_t n,
                     int64_t d, float eps, Stream s);

struct RopeParams {
    float* x;        // [n, heads, hd]
    int64_t s0, s1;  // strides of dims 0 and 1
    int64_t n, heads, hd;
    const int32_t* pos;     // [n]
    const float* inv_freq;  // [half]
    int64_t half;
    float mscale;
    bool inverse;
};
void launch_rope(const RopeParams& p, Stream s);

// y[n, out] = x[n, in] . W^T, W dequantised in the kernel. Variants (each forceable by the tests):
//   kGemm        many rows (a prefill) of fp8 block weights, 64 weight rows x 32 tokens a block on mma.sync
//                (linear_gemm.cu), x as hi/lo f16 with one scale per row; in_dim a multiple of 128, out_dim
//                of 64; needs linear_gemm_supported() and scratch: runs through launch_linear_gemm
//   kMma         fp8 block weights on mma.sync tensor cores, x as hi/lo f16 chunks (linear_mma.cu); in_dim a
//                multiple of 128, out_dim of 16; needs linear_mma_supported() and scratch, so it runs through
//                launch_linear_mma, not launch_linear
//   kSplitRows   n <= 2, in_dim 1024, 2048, 4096 or 8192 (gemv_split.cu); needs gemv_split_supported()
//   kStreamGemv  n <= kGemvMaxRows, 16-byte weight units (gemv.cu); needs gemv_supported()
//   kWarpGemv    n <= 8, one warp per output row (the first decode kernel, kept as the fallback)
//   kTiled       any n, 64x64 f32 FMA tiles
//   kFp8Mma      the native precision's quantised x (e4m3 codes and block scales) times fp8 block weights on
//                the FP8 tensor cores for n <= kLinearFp8MmaMaxRows (linear_fp8mma.cu); in_dim a multiple of
//                128, out_dim of 32; needs linear_fp8mma_supported(): runs through launch_linear_fp8mma
// kAuto picks kSplitRows, then kStreamGemv where supported, else kWarpGemv for n <= 8, else kTiled.
// kCublasLtFp8 (fp8 weights times fp8 activation blocks on tensor cores) runs through fp8_gemm.h and
// kCublasLtBf16x3 (bf16 weights times f32 activations as three bf16 pieces) through bf16_gemm.h, not
// launch_linear.
enum class LinearVariant {
    kAuto,
    kCublasLtFp8,
    kCublasLtBf16x3,
    kGemm,
    kMma,
    kSplitRows,
    kStreamGemv,
    kWarpGemv,
    kTiled,
    kFp8Mma
};
inline constexpr int64_t kGemvMaxRows = 16;
inline constexpr size_t kGemvMaxSmem = 200 * 1024;  // staged token rows per block (of the H200's 227 KB)
void launch_linear(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n,
                   Stream s, LinearVariant v = LinearVariant::kAuto);
bool gemv_supported(const float* x, int64_t ldx, const WeightRef& w, int64_t n);
bool linear_mma_supported(const WeightRef& w, int64_t n);
bool linear_gemm_supported(const WeightRef& w);
void launch_linear_gemm(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n,
                        Scratch& scratch, Stream s);
inline constexpr int64_t kLinearGemmMinRows = 64;
inline constexpr int64_t kLinearFp8MmaMaxRows = 16, kLinearFp8MmaQuantRows = 2;
bool linear_fp8mma_supported(const WeightRef& w, int64_t n);
// x quantised as q [n, in] e4m3 (row stride ldq bytes, a multiple of 16) and sx [in / 128][rows], as
// launch_act_quant_fp8 writes them (fp8_gemm.h); or, q null and n <= kLinearFp8MmaQuantRows, x [n, in] f32
// (row stride ldx) quantised in the kernel (the same bits).
void launch_linear_fp8mma(const uint8_t* q, int64_t ldq, const float* sx, int64_t rows, const float* x,
                          int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n, Stream s);
// Whether the native precision's dispatch gives n rows of w to kFp8Mma (over split_rows at 1, the
// dequantised copies' kernels and cuBLASLt): from 2 rows on matrices of <= 2,048 output rows unless
// DEEPINFER_FP8_MMA says otherwise ("<rows>[:<most output rows>]", "0" never).
bool linear_fp8mma_dispatched(const WeightRef& w, int64_t n);
void launch_linear_mma(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n,
                       Scratch& scratch, Stream s);
// gemv.cuh's format code of w when its layout can be streamed in 16-byte units, else -1.
int gemv_format(const WeightRef& w);
// Whether every matrix's scale rows start on multiples of `align` (MoeParams::scales_4b, scales_16b): the
// scale pointer, and the row stride in elements.
inline bool scale_rows_aligned(const WeightRef* table, int64_t count, int64_t align) {
    for (int64_t i = 0; i < count; ++i)
        if (reinterpret_cast<uintptr_t>(table[i].scale) % align != 0 || table[i].ld_scale % align != 0)
            return false;
    return true;
}
// Rows each warp of the streaming GEMV owns for a matrix of `out_dim` rows (1, 2 or 4).
int gemv_rows_per_warp(int64_t out_dim);
int sm_count();
// quant: x quantised as the native precision's activations where it is staged (in_dim a multiple of 128):
// the quantiser's copy's bits without its launch (taken where act_quant_in_kernels())
void launch_gemv(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n, Stream s,
                 bool quant = false);
bool gemv_split_supported(const float* x, int64_t ldx, const WeightRef& w, int64_t n);
void launch_gemv_split(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy, int64_t n,
                       Stream s, bool quant = false);  // quant: as SplitJob::quant
// Up to kSplitMaxJobs independent linears of the same n in one launch (each gemv_split_supported, all
// gemv_split_same_launch as job 0).
struct SplitJob {
    const float* x;
    int64_t ldx;
    WeightRef w;
    float* y;
    int64_t ldy;
    // x's 128-element blocks quantised to e4m3 and back as they are loaded (ActQuant::kFp8Block128): the
    // bits of launch_act_quant_dequant's copy
    bool quant = false;
};
inline constexpr int kSplitMaxJobs = 8;
struct SplitJobs {
    SplitJob job[kSplitMaxJobs];
    int count = 0;
};
bool gemv_split_same_launch(const SplitJob& a, const SplitJob& b);
void launch_gemv_split(const SplitJobs& jobs, int64_t n, Stream s);

struct WindowStoreJob {
    const float* kv;
    int64_t ld_kv, L, hd;
    float* ring;
    int64_t ld_ring, ring_len, pos0;
};
// Several sequences' stores in one launch (the job table goes to scratch slot 9); one job takes its own
// launch without a table (a pageable table copy costs more than the launch it saves).
void launch_window_stores(const WindowStoreJob* jobs, int64_t count, Scratch& scratch, Stream s);

// Device-to-device copies of small buffers in one launch a batch (the table rides in the kernel's
// parameters: no upload): a speculative step's undo rows, 43 layers' worth, in one launch instead of 43.
struct CopyJob {
    void* dst;
    const void* src;
    int64_t bytes;
};
inline constexpr int kCopyJobsPerLaunch = 128;
void launch_copies(const CopyJob* jobs, int64_t count, Stream s);

// Which compressed entries a query sees (ops::CompMask, the same values): none, the causal prefix, or its
// picks.
enum class AttnCompMask : int { kNone = 0, kCausal = 1, kPicks = 2 };

struct AttentionParams {
    const float* q;
    int64_t q_s0, q_s1;  // [L, H, hd]
    const float* ring;
    int64_t ld_ring;  // [window - 1, hd]
    const float* kv;
    int64_t ld_kv;  // [L, hd]
    const float* comp;
    int64_t ld_comp;
    int64_t n_comp;  // [T, hd]
    const int32_t* picks;
    int64_t ld_picks;
    int64_t k;           // [L, k]
    const float* sinks;  // [H]
    float* out;
    int64_t o_s0, o_s1;  // [L, H, hd]
    int64_t L, H, hd;
    int64_t pos0, n_cached, window;
    AttnCompMask comp_mask;
    int64_t rate;
    float scale;
    bool f16 = false;  // AttentionArgs::f16
    // The fused tail (Backend::attentions_stored): split_kv's merge with store_ring copies kv row t to ring
    // slot (pos0 + t) % store_len as window_store does; split_kv's merge and attention_wgp with rope_pos
    // rotate the output's last 2 * rope_half columns of every head at rope_pos[t] as rope does (the same
    // products).
    float* store_ring = nullptr;
    int64_t store_ld = 0, store_len = 0;
    const int32_t* rope_pos = nullptr;
    const float* rope_inv_freq = nullptr;
    int64_t rope_half = 0;
    float rope_mscale = 1.0f;
    bool rope_inverse = false;
    // Queries prepared where attention_wgp loads them (attentions_stored's QueryPrep): with qp_pos, each head
    // row of q is normed as the unweighted rms_norm (qp_eps) and its last 2 * qp_half columns rotated at
    // qp_pos[t] as rope does (rms_norm_rope's products); q itself stays as it is.
    const int32_t* qp_pos = nullptr;
    const float* qp_inv_freq = nullptr;
    int64_t qp_half = 0;
    float qp_mscale = 1.0f, qp_eps = 0.0f;
    bool qp_inverse = false;
    // With qp_pos: q's rows in bf16 (QueryPrep::src, q's strides), read instead of q.
    const uint16_t* qb = nullptr;
    // The output quantised where attention_wgp stores it (attentions_stored's out_quant): with oq, query t's
    // row of it (head h's columns at h * hd, row stride ld_oq) as act_quant's e4m3 codes and each 128-column
    // block's scale at osx[(h * hd / 128 + b) * ld_osx + t], after the rotation; the f32 out is not written.
    uint8_t* oq = nullptr;
    int64_t ld_oq = 0;
    float* osx = nullptr;
    int64_t ld_osx = 0;
};
// kMma64: the native precision's prefill queries on the tensor cores with all 64 heads a block and the key
// rows turned into f16 once per call (attention_mma64.cu); kMma: a prefill's queries on the tensor cores
// (attention_mma.cu: a block per query and 16 heads, scores and output on mma.sync with hi + lo f16
// operands); kSplitKv: each query's keys split across blocks (flash-decoding), partials merged with the sink
// in a fixed order; kPerQuery: one block per (query, 8 heads) over all its keys, the fallback.
enum class AttentionVariant { kMma64, kMma, kSplitKv, kPerQuery };
// mma64's queries on the warpgroup tensor cores, the same precision: 2 (the default) attention_wgp.cu (a
// producer warpgroup and two consumers, each tile's scores once), 1 attention_wg.cu (scores and output on
// wgmma, 64-key tiles), 0 mma64's own kernel. DEEPINFER_ATTN_WGMMA=0|1|2 in the environment; tests set it
// here. Returns the mode it replaces.
int set_attention_wgmma(int mode);
// Whether kMma64 launches attention_wgp for p, which takes qp_pos and rope_pos (rotations of at most
// kAttentionTailMaxHalf pairs); launch_attention must not get them otherwise.
bool attention_mma64_takes_tail(const AttentionParams& p);
inline constexpr int64_t kAttentionTailMaxHalf = 64;
// kMma: head_dim 512, heads a multiple of 16, 16-byte aligned key rows, 8-byte aligned q and out rows;
// dispatch gives it chunks of at least kAttentionMmaMinQueries queries.
bool attention_mma_supported(const AttentionParams& p);
void launch_attention_mma(const AttentionParams& p, Stream s);
// kMma64: AttentionParams::f16, head_dim 512, heads a multiple of 64, the alignment of kMma; the same chunks.
bool attention_mma64_supported(const AttentionParams& p);
void launch_attention_mma64(const AttentionParams& p, Scratch& scratch, Stream s);
inline constexpr int64_t kAttentionMmaMinQueries = 16;
void launch_attention(const AttentionParams& p, Scratch& scratch, Stream s, AttentionVariant v);
// kSplitKv loads keys in 16-byte units: head_dim % 4 == 0 and 16-byte aligned key rows.
bool attention_split_supported(const AttentionParams& p);
// Key splits per query launch_attention uses for kSplitKv (1 for long chunks).
int64_t attention_splits(const AttentionParams& p);
int attention_max_head_dim();
// Decode queries of several sequences (one query each) in two launches: split_kv's blocks for every job, then
// its merge; each job's splits and sums as its own launch_attention would give (the same bits).
struct AttentionJob {
    AttentionParams p;
    int64_t S;   // key splits
    float* ml;   // [H, S, 2]
    float* acc;  // [H, S, hd]
};
bool attention_batch_takes(const AttentionParams& p);  // L == 1 and split_kv supported
// Every job attention_batch_takes and the same head_dim; one job takes launch_attention (no table upload).
void launch_attention_batch(const AttentionParams* ps, int64_t count, Scratch& scratch, Stream s);

struct CompressParams {
    const float* kv;
    int64_t ld_kv;  // [L, width]
    const float* gate;
    int64_t ld_gate;  // [L, width]
    const float* bias;
    int64_t ld_bias;  // [rate, width]
    float* buf_kv;
    int64_t ld_buf_kv;  // [rate, width]
    float* buf_gate;
    int64_t ld_buf_gate;  // [rate, width]
    float* ovl_kv;
    int64_t ld_ovl_kv;  // [rate, d]
    float* ovl_gate;
    int64_t ld_ovl_gate;  // [rate, d]
    float* out;
    int64_t ld_out;  // [n_new, d]
    int64_t L, width, d, n_new, pos0, rate;
    bool overlap;
};
void launch_compress(const CompressParams& p, Stream s);
// Several sequences' compressors (distinct states) in two launches: the same bits as launch_compress on
// each.
void launch_compresses(const CompressParams* jobs, int64_t count, Scratch& scratch, Stream s);

struct IndexerParams {
    const float* q;
    int64_t q_s0, q_s1;  // [L, H, dim]
    const float* w;
    int64_t ld_w;  // [L, H]
    const float* keys;
    int64_t ld_keys;  // [T, dim]
    int32_t* picks;
    int64_t ld_picks;  // [L, k]
    int64_t L, H, dim, T, k, pos0, rate;
    float weight_scale, score_scale;
    bool f16 = false;  // IndexerTopkArgs::f16
};
// Scores then top-k. Score variants:
//   kTiled      a block per 64 entries, all heads as a register-tiled product staged in shared memory (dim
//               % 4 == 0, 16-byte aligned q and key rows; indexer_tiled_supported; dispatch: T >= 256)
//   kWarpHeads  a warp per entry, lanes over dim (float4), the heads in order with warp sums (dim % 4 == 0,
//               dim <= 512, 16-byte aligned q and key rows; indexer_warp_supported)
//   kBlock      a block per 64 entries, each thread a serial dot per (entry, head group): the fallback
//   kMma        the native precision's scores on mma.sync: 64 heads x 128 dims, q and keys as f16, a
//               block per 64 entries and 2 queries (indexer_mma.cu; indexer_mma_supported; dispatch: a
//               chunk of >= 16 queries)
enum class IndexerVariant { kMma, kTiled, kWarpHeads, kBlock };
bool indexer_mma_supported(const IndexerParams& p);
void launch_indexer_scores_mma(const IndexerParams& p, float* S, Scratch& scratch, Stream s);
// The mma scores' block form: 0 blocks of 2 queries and one entry tile (each makes its queries' q fragments
// for its tile), 1 blocks of 4 queries that walk every tile with the fragments made once (the same products
// and sums: the same picks), 2 (the default) the walking blocks where they fill the GPU (a prefill's chunk of
// >= 4 x SMs queries; H100: 32K prompt 29.3 -> 15.6 ms, 4K 0.74 -> 0.58). DEEPINFER_INDEXER_MMA_WALK=0|1.
void set_indexer_mma_walk(int mode);
bool indexer_tiled_supported(const IndexerParams& p);
bool indexer_warp_supported(const IndexerParams& p);
void launch_indexer_topk(const IndexerParams& p, Scratch& scratch, Stream s, IndexerVariant v);
int indexer_max_topk();
// Several sequences' indexer calls on variant v (kTiled or kWarpHeads, which each job takes) in two launches
// (scores, top-k): the same bits as launch_indexer_topk with v on each.
void launch_indexer_topks(const IndexerParams* jobs, int64_t count, Scratch& scratch, Stream s,
                          IndexerVariant v);

struct MhcParams {
    const void* streams;  // [n, hc, D] contiguous, f32 or (bf16) bf16 (hc_streams.cuh)
    const float* fn;
    int64_t ld_fn;       // [M, hc * D]
    const float* base;   // [M]
    const float* scale;  // [3] (pre) or [1] (head)
    float* x;
    int64_t ld_x;  // [n, D] collapsed output
    float* post;
    int64_t ld_post;  // [n, hc] (pre only)
    float* comb;
    int64_t ld_comb;  // [n, hc * hc] (pre only)
    int64_t n, hc, D;
    float norm_eps, hc_eps;
    int sinkhorn_iters;
    bool head;          // hc_head: only pre weights, M = hc
    bool tf32 = false;  // a prefill's mixes may take TF32 inputs (MhcPreArgs::tf32)
    bool bf16 = false;  // the streams' type
};
// kSplitK: columns split over blocks, parallel Sinkhorn; kPerMix: one block per (mix row, token), the
// fallback.
enum class MhcVariant { kSplitK, kPerMix };
void launch_mhc_pre(const MhcParams& p, Scratch& scratch, Stream s, MhcVariant v);
// kSplitK reads float4s: hc * D % 4 == 0, 16-byte aligned streams and fn rows.
bool mhc_split_supported(const MhcParams& p);
// kSplitK's sums from kMhcDmmaMinTokens tokens on (mhc_mix_dmma.cu: FP64 tensor cores, the products and sums
// in double) where it applies: M <= 24 mixes, hc * D a multiple of 128, 16-byte aligned streams and fn rows.
// part [n, splits, M + 1]: each token's sum of squares, then its M mixes, over each split of the columns
// (mhc_mix_dmma_splits: by the width only).
inline constexpr int64_t kMhcDmmaMinTokens = 2048;
bool mhc_mix_dmma_supported(const MhcParams& p, int M);
int64_t mhc_mix_dmma_splits(const MhcParams& p);
void launch_mhc_mix_dmma(const MhcParams& p, int M, double* part, Stream s);
// The same sums where p.tf32 (mhc_mix_tf32.cu: the mixes on the TF32 tensor cores, the squares in f32), the
// same conditions, splits and part layout.
void launch_mhc_mix_tf32(const MhcParams& p, int M, double* part, Stream s);
int mhc_max_hc();
// streams and out: f32, or bf16 where `bf16` (hc_streams.cuh).
void launch_mhc_post(const void* streams, const float* a, int64_t ld_a, const float* post, int64_t ld_post,
                     const float* comb, int64_t ld_comb, void* out, bool bf16, int64_t n, int64_t hc,
                     int64_t D, Stream s);

struct RouteParams {
    const float* logits;
    int64_t ld_logits;  // [n, E]
    const float* bias;  // [E] or null
    const void* tid2eid;
    bool tid_i64;
    int64_t ld_tid;
    int64_t vocab;          // [vocab, k] or null
    const int32_t* tokens;  // [n]
    int32_t* ids;
    int64_t ld_ids;  // [n, k]
    float* weights;
    int64_t ld_weights;  // [n, k]
    int64_t n, E, k;
    bool sigmoid;
    float scaling;
};
void launch_route(const RouteParams& p, Stream s);

// Experts' weight refs in device memory: table[3 * e + {0: w1, 1: w3, 2: w2}].
struct MoeParams {
    const float* x;
    int64_t ld_x;  // [n, D]
    const int32_t* ids;
    int64_t ld_ids;  // [n, k]
    const float* w;
    int64_t ld_w;            // [n, k]
    const WeightRef* table;  // device [3 * n_experts]
    int64_t n_experts;
    float* out;
    int64_t ld_out;  // [n, D]
    int64_t n, k, D, I;
    float limit;           // swiglu_limit: > 0 (checked); +inf: no clamp
    int gemv_format = -1;  // every expert matrix's gemv_format(), or -1 if they differ
    bool mma_ok = false;   // moe_mma takes the table: every scale UE8M0 in [kFp4F16ScaleMin,
                           // kFp4F16ScaleMax], each expert's W1 and W3 with one row stride
    bool scales_4b =
        false;  // every scale row 4-byte aligned (moe_wgmma copies a row's 4 group scales at once)
    bool scales_16b = false;  // every scale row 16-byte aligned (moe_w4a8's scales-once copies)
    bool e4m3_ok = false;  // moe_w4a8 takes the table: fp4 with UE8M0 scales, each row's four group scales of
                           // a 128-element chunk within 2^11 of each other (fp4_scales_fold_to_e4m3)
    bool e4m3_rows = false;  // and all of a row's group scales within 2^11: one fold base a row (fewer ops)
    // TMA maps of the fp4 matrices' bytes, [3 * n_experts] CUtensorMaps in table's order (tensor_map.h: boxes
    // of 64 bytes x 32 rows, the 64-byte swizzle), or null where the table has none (moe_w4a8_bulk_ss's kTma)
    const void* maps = nullptr;
    // Expert parallelism's `experts` pass (ops/moe.h): experts outside [owned_first, owned_end) count as ids
    // outside [0, n_experts) (their pairs take no part), every taking pair's unweighted row goes to y_out
    // ([n * k, D], the slots; the other rows are left as they are) and no combine runs.
    int64_t owned_first = 0, owned_end = INT64_MAX;
    float* y_out = nullptr;
    // MoeArgs::act: x comes quantised (the backend's copy; kW4a8 takes x unquantised and quantises it itself)
    // and every variant quantises h between its up and down launches (moe_quantise_h); gemm then drops the lo
    // halves, zero for quantised values. kMma with one token quantises x (where x_raw) and h (where
    // act_quant_in_kernels()) in the registers its warps make their chunks from: the copies' bits without
    // their launches.
    bool act_fp8 = false;
    // act_fp8 with x not yet quantised: kMma at one token quantises it (set where act_quant_in_kernels());
    // kW4a8 quantises any x
    bool x_raw = false;
};
// Variants: kW4a8 (moe_w4a8.cu: native precision's prefill chunks as W4A8 on the FP8 warpgroup tensor cores,
// fp4 turned into e4m3 in registers, activations quantised per 128; e4m3_ok, scales_4b, the pairs gemm
// takes with at least 64 an expert), kWgmma (moe_wgmma.cu: what kGemm takes, on the warpgroup tensor cores:
// 64 weight rows x 64 token halves a wgmma, the token rows staged in shared memory), kGemm (moe_gemm.cu: a
// prefill's many tokens per expert as register-tiled products on mma.sync, activations as hi/lo f16 with one
// scale per row; what kMma takes, from kMoeGemmMinPairs (and 8 per expert) to kMoeGemmMaxPairs pairs, any
// count when forced), kMma (moe_mma.cu: fp4 experts on mma.sync tensor cores, activations as hi/lo f16
// chunks; D and I multiples of 128, mma_ok, n * k <= moe_mma_max_pairs()), kSplitRows (moe_split.cu: rows
// split over a block's threads with x in registers; D and I each 1024, 2048, 4096 or 8192, n * k <=
// kMoeGroupedMaxPairs, gemv_format >= 0; up, down and the combine for one token), kGrouped (moe_grouped.cu:
// each selected expert's weights streamed once per step for all the tokens that chose it; n * k <=
// kMoeGroupedMaxPairs and gemv_format >= 0) and kPerPair (one pass over an expert's weights per (token,
// slot); the first kernel, kept as the fallback). kAuto: grouped where it applies.
enum class MoeVariant { kAuto, kW4a8, kWgmma, kGemm, kMma, kSplitRows, kGrouped, kPerPair };
inline constexpr int64_t kMoeGroupedMaxPairs = 1024;
// gemm from 2048 pairs and 8 per expert (H200, 256 experts: at 1020 pairs, ~4 tokens per expert, gemm took
// 3.45 ms against mma's 1.94; its 32-token tiles run mostly empty)
// The most: a 4,096-token prefill chunk at k = 6 (24,576 pairs) in one pass, each selected expert's weights
// read once (at 16,384 it ran as 2,730 + 1,366 tokens, reading them twice).
inline constexpr int64_t kMoeGemmMinPairs = 2048, kMoeGemmMaxPairs = 32768;
void launch_moe(const MoeParams& p, Scratch& scratch, Stream s, MoeVariant v = MoeVariant::kAuto);
bool moe_w4a8_supported(const MoeParams& p, bool forced = false);
void launch_moe_w4a8(const MoeParams& p, Scratch& scratch, Stream s);
// w4a8's token copies by 32-bit unit offsets (the same bytes to the same places, fewer instructions); off
// until measured on the GPU (DEEPINFER_W4A8_UNITS in the environment turns it on; the tests set it here).
void set_moe_w4a8_units(bool on);
// w4a8's tiles of 64 token rows where an expert averages <= 64 of the pass's pairs (128 otherwise); off until
// measured on the GPU (DEEPINFER_W4A8_N64).
void set_moe_w4a8_n64(bool on);
// w4a8's 128-row tiles on the warp-specialised kernel (moe_w4a8_ws.cu: a warpgroup that copies and converts,
// two that multiply; the same sums); off: measured slower on the H200 (DEEPINFER_W4A8_WS,
// docs/benchmarks.md).
void set_moe_w4a8_ws(bool on);
// w4a8 on the bulk-copy kernel (moe_w4a8_bulk.cu: token rows in tile order, bulk copies, clusters of
// `cluster` blocks sharing each token tile; the same sums): 0 off, the default (measured slower;
// DEEPINFER_W4A8_BULK=1|2|4); its passes so far (a test's check that it ran).
void set_moe_w4a8_bulk(int cluster);
// The bulk kernel's inputs with the weights converted by `conv` warpgroups of their own (1 or 2; 0 off) into
// shared memory, both wgmma operands there (moe_w4a8_bulk_ss.cu; the same sums); `narrow`: tiles of <= 64 /
// 96 pairs by wgmma n64 / n96. Two with narrow tiles are the default where the shapes allow
// (DEEPINFER_W4A8_BULK_SS=0|1|2, DEEPINFER_W4A8_SS_NARROW=0|1); the getters give the present choice.
void set_moe_w4a8_bulk_ss(int conv, bool narrow = false);
int moe_w4a8_bulk_ss();
bool moe_w4a8_ss_narrow();
// The converting kernel's up pass with SwiGLU in its epilogue (two converters, row folds: TiledIo::swi_out):
// h [pairs, I] written instead of both parts [pairs, 2 I], the same values; off (DEEPINFER_W4A8_SS_SWIGLU=1):
// the 4K prefill 2.3% slower with it (H100, docs/benchmarks.md 2026-12-07, eighth session); its launches.
void set_moe_w4a8_ss_swiglu(bool on);
int64_t moe_w4a8_ss_swiglu_launches();
// The converting kernel's fp4 rows by TMA (two converters, row folds, not the SwiGLU epilogue; where the
// expert table has its maps, MoeParams::maps): a box of 32 rows a converting warp and chunk instead of four
// cp.async a thread, the same bytes in the same places; off until measured (DEEPINFER_W4A8_SS_TMA=1); the
// passes that took it.
void set_moe_w4a8_ss_tma(bool on);
int64_t moe_w4a8_ss_tma_launches();
// The converting kernel's up and down sums stored as bf16 (two converters, row folds, not the SwiGLU
// epilogue, not expert parallelism's slots, where the combine takes them): rounded to nearest even, as the
// expert GEMMs of DeepSeek's inference code write theirs, then read in f32 by h's quantiser and the combine;
// half the bytes of g [pairs, 2 I] and y [pairs, D] written and read back. Off until measured
// (DEEPINFER_W4A8_BF16_MID=1); the MoE calls that took it.
void set_moe_w4a8_bf16_mid(bool on);
int64_t moe_w4a8_bf16_mid_launches();
int64_t moe_w4a8_bulk_launches();
// w4a8 with two warpgroups a block, each its own 64 weight rows, sharing the token rows (half the token
// copies an FLOP; the same sums): on by default, 0.5-2.4% faster on the H200 (DEEPINFER_W4A8_WG1 turns it
// off).
void set_moe_w4a8_wg2(bool on);
// w4a8 on a grid of one block an SM, each taking (expert, column block) items from a counter with the next
// item's plan entries and weight rows loaded during this one's chunks (the scales-once, row-fold form; the
// same sums): on by default (H100: the 4-layer MoE 2.2% faster at 4,096 tokens, 1.7% at 32,768;
// DEEPINFER_W4A8_PERSIST=0 turns it off). Its launches so far (a test's check that it ran).
void set_moe_w4a8_persist(bool on);
bool moe_w4a8_persist();
int64_t moe_w4a8_persist_launches();
// w4a8's up pass writing h = SwiGLU(W1 part, W3 part) [pairs, I] from its epilogue (a block's two warpgroups
// take W1's and W3's rows of the same columns) where it runs the persistent form, instead of both parts for
// the quantiser to combine (the same values, half the bytes): off, measured 26% slower over 4 layers on an
// H100 (DEEPINFER_W4A8_SWIGLU_OUT). Its launches so far.
void set_moe_w4a8_swiglu_out(bool on);
int64_t moe_w4a8_swiglu_out_launches();
// w4a8's scales copied once (a block's weight rows' group scales, a tile's token scales) by 16-byte copies
// instead of a 4-byte copy a row and chunk into every stage, which took 32 shared-memory wavefronts each (38%
// of the kernel's on an H100, docs/benchmarks.md); the same bits. On by default (H100: the 4,096-token
// MoE 12.8% faster; DEEPINFER_W4A8_SCALES_IN_STAGES turns it off); applies where every scale row is 16-byte
// aligned and K / 128 is a multiple of 4. The launches it made so far (tests check that it ran).
void set_moe_w4a8_scales_once(bool on);
bool moe_w4a8_scales_once();
int64_t moe_w4a8_scales_once_launches();
// The native precision's activations quantised inside stream_gemv (where it stages x) and the one-token moe
// mma (where its warps make their chunks of x and h) instead of by a quantiser launch before them: off until
// their GPU tests (GemvsQuantiseInTheKernelBitForBit, CudaMoe's token-alone check) have passed
// (DEEPINFER_QUANT_IN_KERNELS in the environment; the tests set it here). split_rows always does.
void set_act_quant_in_kernels(bool on);
bool act_quant_in_kernels();
// Whether every fp4 matrix of the table (device copy and host copy, count entries) folds its group scales
// into e4m3 as moe_w4a8 needs: relative to each chunk's largest (MoeParams::e4m3_ok), or to each row's
// (e4m3_rows); synchronises the stream.
struct E4m3Fold {
    bool chunks = false, rows = false;
};
E4m3Fold fp4_scales_fold_to_e4m3(const WeightRef* table_device, const WeightRef* table_host, int64_t count,
                                 Stream s);
bool moe_wgmma_supported(const MoeParams& p, bool forced = false);
void launch_moe_wgmma(const MoeParams& p, Scratch& scratch, Stream s);
bool moe_gemm_supported(const MoeParams& p, bool forced = false);
void launch_moe_gemm(const MoeParams& p, Scratch& scratch, Stream s);
bool moe_mma_supported(const MoeParams& p);
void launch_moe_mma(const MoeParams& p, Scratch& scratch, Stream s);
// The moe mma (one token, and the plan's passes over more) with its weights staged in shared memory by
// cp.async, 4 or 8 chunks ahead a warp (0: held in registers, two ahead; the same sums, so the same bits);
// off until measured on the GPU (DEEPINFER_MOE_MMA_STAGES=4|8 in the environment; the tests set it here).
// Needs 4-byte scale rows.
void set_moe_mma_stages(int stages);
// The native precision's plan passes on mma 8 tokens at a time instead of 4 (its chunks' lo halves are 0:
// the same sums; the weights read once per 8 of an expert's tokens): on (DEEPINFER_MOE_MMA_TOK4 turns it
// off).
void set_moe_mma_tok8(bool on);
bool moe_mma_tok8();
// The most (token, slot) pairs mma takes in one pass: 2,047 by default (a batch of up to 341 tokens at k = 6
// in one pass; with kMoeGroupedMaxPairs, 171-341 tokens ran as two chunks that each read nearly every
// expert); DEEPINFER_MOE_MMA_PAIRS sets it; chunking changes no bits of a variant.
void set_moe_mma_max_pairs(int64_t pairs);
int64_t moe_mma_max_pairs();
// Whether every scale byte of the table's fp4 matrices lies in the range moe_mma folds into f16 (one pass
// over the scales; synchronises the stream).
bool fp4_scales_fold_to_f16(const WeightRef* table_device, const WeightRef* table_host, int64_t count,
                            Stream s);
bool moe_grouped_supported(const MoeParams& p);
void launch_moe_grouped(const MoeParams& p, Scratch& scratch, Stream s);
bool moe_split_supported(const MoeParams& p);
void launch_moe_split(const MoeParams& p, Scratch& scratch, Stream s);
// out[t] = sum_j w[t, j] * y[t * k + j] in slot order (double accumulation): every variant ends with it, and
// it is expert parallelism's `combine` pass on the gathered slots.
void launch_moe_combine(const MoeParams& p, const float* y, Stream s);
// The same sums from bf16 rows y [n * k, D] (8-byte aligned), where moe_combine_takes_bf16(p).
bool moe_combine_takes_bf16(const MoeParams& p);
void launch_moe_combine_bf16(const MoeParams& p, const void* y, Stream s);

// Last launch error as text, or nullptr (checked by the host after each launch).
const char* last_launch_error();

}  // namespace di::cuda
