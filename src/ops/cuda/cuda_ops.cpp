// CudaBackend op methods: check(args) first, then the device check, then the launch with plain params.
#include <algorithm>

#include "ops/cuda/argmax.h"
#include "ops/cuda/bf16_gemm.h"
#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/env_switch.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/top_candidates.h"

namespace di::ops::cuda_impl {
namespace {

// The variants of each multi-kernel op in dispatch preference order, the fallback last; kXxxEnum[i] is the
// launcher's name for variant i (indexer_topk's and attention's: cuda_state_ops.cpp; moe's:
// cuda_moe_ops.cpp).
constexpr cuda::LinearVariant kLinearEnum[] = {
    cuda::LinearVariant::kFp8Mma,     cuda::LinearVariant::kCublasLtFp8, cuda::LinearVariant::kCublasLtBf16x3,
    cuda::LinearVariant::kGemm,       cuda::LinearVariant::kMma,         cuda::LinearVariant::kSplitRows,
    cuda::LinearVariant::kStreamGemv, cuda::LinearVariant::kWarpGemv,    cuda::LinearVariant::kTiled};
// The variants that take e4m3 activations (linears() sorts its jobs by them first).
constexpr int kLinearFp8Mma = 0, kLinearLtFp8 = 1;
// Rows from which fp8-activation linears go to the tensor cores (fewer: the GEMVs on dequantised blocks).
constexpr int64_t kLtMinRows = 16;
// Rows from which bf16 weights go to the tensor cores as bf16x3 (fewer: the GEMVs stream them at the
// bandwidth; measured on the H200, docs/benchmarks.md).
constexpr int64_t kBf16x3MinRows = 4;

std::vector<KernelVariant> mhc_variants(const char* op) {
    return {{op, "split_k",
             "hc_mult <= 8, hc_mult * hidden a multiple of 4, 16-byte aligned rows; columns split over "
             "blocks, parallel Sinkhorn",
             false},
            {op, "per_mix", "hc_mult <= 8", true}};
}

std::vector<KernelVariant> fused_variants(const char* op, const char* claims) {
    return {{op, "fused", claims, false}, {op, "separate", "any case: the two ops' own dispatch", true}};
}

}  // namespace

CudaBackend::CudaBackend(int device)
    : linear_v_(
          {{"linear", "fp8_mma",
            "fp8 block weights times fp8 activation blocks (native precision); from 2 to 16 rows on <= 2048 "
            "output rows (DEEPINFER_FP8_MMA=<rows>[:<most output rows>] sets them), 1 to 16 when forced; "
            "in_dim a multiple of 128, out_dim "
            "of 32, 16-byte weight rows; mma.sync m16n8k32 e4m3 tensor cores, each 128-wide K block "
            "summed at the tensor cores' reduced precision, then scaled into f32 sums (as cublaslt_fp8), "
            "so held to 1e-3; "
            "a row's bits do not depend on the other rows, but other row counts run other kernels, so not "
            "batch-invariant",
            false, true, false, 1e-3},
           {"linear", "cublaslt_fp8",
            "fp8 weights times fp8 activation blocks (native precision); n >= 16 rows (any n when "
            "forced); in_dim and out_dim multiples of 128, 256-byte aligned weight and y; cuBLASLt "
            "block-scaled FP8 on tensor cores; its algorithm depends on n, so not batch-invariant; its "
            "tensor cores accumulate each 128-wide K block at reduced precision (2.2e-4 to 2.4e-4 "
            "relative L2 against the reference on the H200), so held to 1e-3",
            false, true, false, 1e-3},
           {"linear", "cublaslt_bf16x3",
            "bf16 weights; n >= 4 rows (any n when forced); in_dim a multiple of 8, out_dim of 4, 256-byte "
            "aligned weight with rows of 16-byte multiples; f32 activations as three bf16 pieces that sum to "
            "them exactly, one cuBLASLt BF16 GEMM with f32 accumulation; split-K partials kept out of the "
            "output, so deterministic; its algorithm depends on n, so not batch-invariant",
            false, true, false},
           {"linear", "gemm",
            "fp8 block weights; n >= 64 rows (any n when forced); in_dim a multiple of 128, "
            "out_dim of 64, 16-byte weight rows; 64 weight rows x 32 tokens a block on mma.sync "
            "tensor cores, f32 activations as hi + lo f16 with one scale per row; a row's bits do not "
            "depend on the other rows, but fewer rows run another kernel, so not batch-invariant",
            false, true, false},
           {"linear", "mma",
            "fp8 block weights; n >= 4 rows, or 2 on >= 4096 output rows (any n when forced); in_dim a "
            "multiple of 128, out_dim of 16; "
            "16-byte weight rows; mma.sync tensor cores, f32 activations as hi + lo f16 per 128 elements; "
            "a row's bits do not depend on the other rows of its launch, but fewer rows run another kernel, "
            "so not batch-invariant",
            false, true, false},
           {"linear", "split_rows",
            "n <= 2 rows; in_dim 1024, 2048, 4096 or 8192; 16-byte weight rows; rows split over a "
            "block's threads, x in registers",
            false},
           {"linear", "stream_gemv",
            "n <= 16 rows; 16-byte weight rows; in_dim a multiple of the 16-byte unit; staged rows within "
            "200 KiB of shared memory",
            false},
           {"linear", "warp_gemv", "n <= 8 rows (any n when forced)", true},
           {"linear", "tiled", "any n", true}}),
      moe_v_(
          {{"moe", "w4a8",
            "native precision, fp4 experts whose four group scales of each 128-element chunk of a row lie "
            "within 2^11; the pairs gemm takes; W4A8 on the FP8 warpgroup tensor cores: each expert's rows "
            "times 64 token rows a wgmma, fp4 turned into e4m3 in registers (the group scale folded in), "
            "activations quantised per 128 as the native precision's quantiser does, f32 sums promoted "
            "every 128; held to 1e-2 relative L2 (the tensor cores sum a chunk's FP8 products at ~14 bits, "
            "moving more SwiGLU outputs across e4m3 rounding boundaries: ops/op_cases.h kMoeW4a8Cuda)",
            false, true, true, 1e-2},
           {"moe", "wgmma",
            "what gemm takes, from 2048 (and 8 per expert) to 32768 (token, slot) pairs a chunk; "
            "each expert's rows times 64 token rows (hi halves, or 32 tokens' hi and lo) at a time on the "
            "warpgroup tensor cores (wgmma, token rows staged in shared memory by cp.async), f32 "
            "activations as hi + lo f16 with one scale per row (hi only for native's quantised ones)",
            false},
           {"moe", "gemm",
            "what mma takes, from 2048 (and 8 per expert) to 32768 (token, slot) pairs a chunk; "
            "each expert's rows times 32 of its tokens at a time on mma.sync tensor cores, f32 "
            "activations as hi + lo f16 with one scale per row (hi only for native's quantised ones)",
            false},
           {"moe", "mma",
            "fp4 experts with UE8M0 scales in [2^-23, 2^1]; hidden and moe_dim multiples of 128; tokens in "
            "chunks of <= 1024 pairs; mma.sync tensor cores, f32 activations as hi + lo f16 per 128 elements",
            false},
           {"moe", "split_rows",
            "hidden and moe_dim each 1024, 2048, 4096 or 8192; every expert matrix in one format with "
            "16-byte "
            "rows; rows split over a block's threads, x in registers; tokens in chunks of <= 1024 pairs",
            false},
           {"moe", "grouped",
            "every expert matrix in one format with 16-byte rows; tokens in chunks of <= 1024 pairs", false},
           {"moe", "per_pair", "any n", true}}),
      mhc_pre_v_(mhc_variants("mhc_pre")),
      hc_head_v_(mhc_variants("hc_head")),
      attention_v_(
          {{"attention", "mma64",
            "native precision (f16 operands), head_dim 512, heads a multiple of 64, 16-byte aligned "
            "key rows, chunks of >= 16 queries, and the decode queries of a call that holds at least "
            "kAttentionDecodeWgpMinJobs (8) of them (attention_decode.h); key rows turned into f16 with "
            "one scale each, then a block per query and 64 heads on the tensor cores; a query's bits do "
            "not depend on the other queries, but shorter chunks and smaller decode batches run another "
            "kernel, so not batch-invariant",
            false, true, false},
           {"attention", "mma",
            "head_dim 512, heads a multiple of 16, 16-byte aligned key rows, chunks of >= 16 queries; "
            "a block per query and 16 heads on mma.sync tensor cores, hi + lo f16 operands (hi only "
            "with the native precision's f16 permission); a query's bits do not depend on the other "
            "queries, but shorter chunks run another kernel, so not batch-invariant",
            false, true, false},
           {"attention", "split_kv",
            "head_dim <= 512, a multiple of 4, 16-byte aligned key rows; keys split across blocks, merged "
            "with the sink; the split count depends on the chunk's query count, so not batch-invariant",
            false, true, false},
           {"attention", "per_query", "head_dim <= 512", true}}),
      indexer_v_(
          {{"indexer_topk", "mma",
            "native precision (f16 q and keys), 64 heads x 128 dims, 16-byte aligned key rows; scores on "
            "mma.sync tensor cores, a block per 64 entries and 2 queries, tiles no query sees skipped; "
            "dispatch: chunks of >= 16 queries (decode keeps tiled until measured there)",
            false},
           {"indexer_topk", "tiled",
            "dim a multiple of 4, 16-byte aligned q and key rows, from 256 entries; a block per 64 entries, "
            "all heads as a register-tiled product",
            false},
           {"indexer_topk", "warp_heads",
            "dim a multiple of 4 and <= 512, 16-byte aligned q and key rows; a warp per entry, lanes "
            "over dim, heads in order",
            false},
           {"indexer_topk", "block", "any shape; a block per 64 entries", true}}),
      norm_rope_v_(fused_variants("rms_norm_rope",
                                  "row length even and <= 4096, rope.x the norm's output; one launch, "
                                  "bit-identical to the two")),
      pre_norm_v_(fused_variants("mhc_pre_norm",
                                 "where mhc_pre takes split_k and the norm's x is mhc_pre's x; the norm in "
                                 "mhc_pre's finish kernel")),
      head_norm_v_(
          fused_variants("hc_head_norm",
                         "where hc_head takes split_k and the norm's x is hc_head's out; the norm in "
                         "hc_head's finish kernel")),
      add_post_v_(fused_variants("add_mhc_post",
                                 "mhc_post's a is the add's out, rows of one length; the sum in mhc_post's "
                                 "kernel, bit-identical to the two")),
      device_(device),
      alloc_(device),
      scratch_(alloc_) {
    int n = 0;
    DI_CHECK(cudaGetDeviceCount(&n) == cudaSuccess && device >= 0 && device < n,
             "CUDA device {} not available ({} devices)", device, n);
    DI_CUDA_CHECK(cudaSetDevice(device));
    cudaStream_t s;
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_ = s;
    graphs_ = std::make_unique<StepGraphs>(
        s, [this](uint32_t mask) { return scratch_.generations(mask) * 31u + variant_epoch_; });
}

void CudaBackend::embed(const EmbedArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "embed");
    DI_CHECK(a.tokens.is_contiguous() && a.table.stride[1] == 1, "embed: tokens/table layout");
    cuda::launch_embed(a.tokens.ptr<int32_t>(), a.tokens.numel(), a.table.data,
                       fdt(a.table.dtype, "embed.table"), a.table.stride[0], a.table.shape[0],
                       a.table.shape[1], a.out.data, fdt(a.out.dtype, "embed.out"), ld(a.out), stream_);
    launched("embed");
}

void CudaBackend::cast(const CastArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "cast");
    cuda::launch_cast(a.x.data, fdt(a.x.dtype, "cast.x"), ld(a.x), a.out.data, fdt(a.out.dtype, "cast.out"),
                      ld(a.out), a.x.shape[0], a.x.shape[1], stream_);
    launched("cast");
}

void CudaBackend::add(const AddArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "add");
    need_f32_rows(a.a, "add.a"), need_f32_rows(a.b, "add.b"), need_f32_rows(a.out, "add.out");
    cuda::launch_add(f32(a.a), ld(a.a), f32(a.b), ld(a.b), f32m(a.out), ld(a.out), a.a.shape[0], a.a.shape[1],
                     stream_);
    launched("add");
}

void CudaBackend::swiglu(const SwigluArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "swiglu");
    need_f32_rows(a.gate, "swiglu.gate"), need_f32_rows(a.up, "swiglu.up"),
        need_f32_rows(a.out, "swiglu.out");
    cuda::launch_swiglu(f32(a.gate), ld(a.gate), f32(a.up), ld(a.up), f32m(a.out), ld(a.out), a.gate.shape[0],
                        a.gate.shape[1], a.limit, stream_);
    launched("swiglu");
}

// Matrices of at most this many rows go to split_rows alone too, where DEEPINFER_SPLIT_FEW_ROWS sets it (off
// until measured): stream_gemv gives a row a warp, so the router's 256-row gate runs on 256 warps (~4 us for
// its 2 MB in a batch-1 step on the H200).
int64_t split_few_rows() {
    static const int64_t rows = std::max<int64_t>(0, cuda::env_int("DEEPINFER_SPLIT_FEW_ROWS", 0));
    return rows;
}

// split_rows alone beats stream_gemv only on large matrices (H200: 33 MB q_b/o_b 12-13 us against 15-18;
// 4-8 MB ones 5-7.6 us against 4-6.3); sharing a launch with other jobs, it takes any size.
bool split_rows_pays(const WeightRef& w) {
    const double bytes = double(w.out_dim) * double(w.in_dim) *
                         (w.format == 1                   ? 1.0
                          : w.format == 2                 ? 0.5
                          : w.dense_dt == cuda::Fdt::kF32 ? 4.0
                                                          : 2.0);
    return bytes >= 16e6 || w.out_dim <= split_few_rows();
}

// Whether cuBLASLt's block-scaled FP8 matmul takes the call (fp8 activation blocks on an fp8 weight). The
// weight and y must be 256-byte aligned: cuBLASLt picks algorithms for that alignment unless told otherwise
// (its default minimum), and our own buffers (q, scales, temporaries) are.
bool lt_fp8_takes(const LinearArgs& a, const WeightRef& w) {
    if (a.act != ActQuant::kFp8Block128 || w.format != 1 || a.x.shape[0] == 0) return false;
    cuda::LtFp8Gemm* lt = cuda::LtFp8Gemm::instance();
    return lt && reinterpret_cast<uintptr_t>(w.data) % 256 == 0 &&
           reinterpret_cast<uintptr_t>(a.y.data) % 256 == 0 &&
           lt->supports(a.x.shape[0], w.in_dim, w.out_dim, w.ld, ld(a.y));
}

bool bf16x3_takes(const WeightRef& w, int64_t n) {
    if (w.format != 0 || w.dense_dt != cuda::Fdt::kBF16 || n == 0) return false;
    cuda::LtBf16x3Gemm* lt = cuda::LtBf16x3Gemm::instance();
    return lt && lt->supports(n, w.in_dim, w.out_dim, w.data, w.ld);
}

// Which linear variants take a call (OpVariants' `takes`; forced: a test or the screen asks for it).
struct LinearTakes {
    const LinearArgs& a;
    const WeightRef& w;
    bool in_group;  // split_rows would share its launch with other jobs
    bool operator()(int i, bool forced) const {
        const int64_t n = a.x.shape[0];
        switch (kLinearEnum[i]) {
            case cuda::LinearVariant::kFp8Mma:
                return (forced || cuda::linear_fp8mma_dispatched(w, n)) && a.act == ActQuant::kFp8Block128 &&
                       cuda::linear_fp8mma_supported(w, n);
            case cuda::LinearVariant::kCublasLtFp8:
                return (forced || n >= kLtMinRows) && lt_fp8_takes(a, w);
            case cuda::LinearVariant::kCublasLtBf16x3:
                return (forced || n >= kBf16x3MinRows) && bf16x3_takes(w, n);
            case cuda::LinearVariant::kGemm:
                return (forced || n >= cuda::kLinearGemmMinRows) && cuda::linear_gemm_supported(w);
            case cuda::LinearVariant::kMma:  // H200: the GEMVs win at n = 1, and at n = 2 on < 4096 rows
                return (forced || n >= 4 || (n >= 2 && w.out_dim >= 4096)) &&
                       cuda::linear_mma_supported(w, n);
            case cuda::LinearVariant::kSplitRows:
                return cuda::gemv_split_supported(f32(a.x), ld(a.x), w, n) &&
                       (forced || in_group || split_rows_pays(w));
            case cuda::LinearVariant::kStreamGemv:
                return cuda::gemv_supported(f32(a.x), ld(a.x), w, n);
            case cuda::LinearVariant::kWarpGemv:
                return forced || n <= 8;  // forced: any n
            default:
                return true;
        }
    }
};

int CudaBackend::choose_linear(const LinearArgs& a, const WeightRef& w, bool in_group) {
    return linear_v_.choose(LinearTakes{a, w, in_group}, [&] {
        return fmt::format("n {}, weight {}x{}", a.x.shape[0], w.out_dim, w.in_dim);
    });
}

void CudaBackend::linear(const LinearArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "linear");
    const WeightRef w = weight_ref(a.w, "linear.w");
    if (a.y.dtype == DType::kBF16) return linear_bf16_out(a, w);
    if (a.x.dtype == DType::kF8E4M3) return linear_quantised(a, w);
    linear_chosen(a, w, choose_linear(a, w, false));
}

void CudaBackend::linear_bf16_out(const LinearArgs& a, const WeightRef& w) {
    const int64_t n = a.x.shape[0], out = w.out_dim;
    LinearArgs f = a;  // the same call into f32
    f.y = TensorView::contiguous(scratch_.get(17, size_t(std::max<int64_t>(n * out, 1)) * sizeof(float)),
                                 DType::kF32, {n, out}, a.y.device);
    if (a.x.dtype == DType::kF8E4M3) {
        linear_quantised(f, w);
    } else {
        const int v = choose_linear(f, w, false);
        cuda::LtFp8Gemm* lt = cuda::LtFp8Gemm::instance();
        if (kLinearEnum[v] == cuda::LinearVariant::kCublasLtFp8 &&
            reinterpret_cast<uintptr_t>(a.y.data) % 256 == 0 &&
            lt->supports_bf16(n, w.in_dim, out, w.ld, ld(a.y)))
            return linear_lt_fp8(a, w);
        linear_chosen(f, w, v);
    }
    cast({.x = f.y, .out = a.y});
}

// cuBLASLt reads the codes and scales as they are where the dispatch picks it for the call and they have its
// layout (n a multiple of 4, so no padding rows; block-major scales of n rows; 16-byte code rows; 256-byte
// aligned); otherwise the rows go back to f32 (the quantiser's dequantised values, which the other kernels
// quantise to the same codes) and the call runs as on f32 x.
void CudaBackend::linear_quantised(const LinearArgs& a, const WeightRef& w) {
    const int64_t n = a.x.shape[0], in = w.in_dim;
    // the call on f32 x: for the dispatch (whose alignment checks see the codes' address, no more aligned
    // than the scratch buffer the rows go to) and then for the kernels that read f32
    LinearArgs f = a;
    f.x = TensorView::contiguous(a.x.data, DType::kF32, {n, in}, a.x.device);
    f.x_scales = {};
    const int v = choose_linear(f, w, false);
    cuda::LtFp8Gemm* lt = cuda::LtFp8Gemm::instance();
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 256 == 0; };
    if (kLinearEnum[v] == cuda::LinearVariant::kCublasLtFp8 && lt != nullptr && n % 4 == 0 &&
        a.x_scales.stride[0] == 1 && a.x_scales.stride[1] == n && ld(a.x) % 16 == 0 && aligned(a.x.data) &&
        aligned(a.x_scales.data) &&
        lt->supports(n, in, w.out_dim, w.ld, ld(a.y), nullptr, nullptr, ld(a.x))) {
        const LtInput codes{nullptr, a.x.ptr<uint8_t>(), a.x_scales.ptr<float>(), ld(a.x), n};
        return linear_lt_fp8(a, w, &codes);
    }
    auto* xf = static_cast<float*>(scratch_.get(16, size_t(std::max<int64_t>(n * in, 1)) * sizeof(float)));
    f.x.data = xf;
    cuda::launch_fp8_rows_to_f32(a.x.ptr<uint8_t>(), ld(a.x), a.x_scales.ptr<float>(), a.x_scales.stride[0],
                                 a.x_scales.stride[1], n, in, xf, in, stream_);
    launched("linear");
    linear_chosen(f, w, v);
}

void CudaBackend::linear_chosen(const LinearArgs& a, const WeightRef& w, int v) {
    if (kLinearEnum[v] == cuda::LinearVariant::kCublasLtFp8) return linear_lt_fp8(a, w);
    if (kLinearEnum[v] == cuda::LinearVariant::kFp8Mma) return linear_fp8mma(a, w);
    const float* x = f32(a.x);
    int64_t ldx = ld(a.x);
    if (a.act == ActQuant::kFp8Block128 && kLinearEnum[v] == cuda::LinearVariant::kSplitRows) {
        // quantised in the kernel's registers: the copy's bits without its launch
        cuda::launch_gemv_split(x, ldx, w, f32m(a.y), ld(a.y), a.x.shape[0], stream_, true);
        launched("linear");
        return;
    }
    if (a.act == ActQuant::kFp8Block128 && kLinearEnum[v] == cuda::LinearVariant::kStreamGemv &&
        cuda::act_quant_in_kernels()) {
        cuda::launch_gemv(x, ldx, w, f32m(a.y), ld(a.y), a.x.shape[0], stream_,
                          true);  // quantised where staged
        launched("linear");
        return;
    }
    if (a.act == ActQuant::kFp8Block128) {  // the f32 kernels on the dequantised blocks
        float* xq = static_cast<float*>(scratch_.get(6, size_t(a.x.shape[0] * w.in_dim) * sizeof(float)));
        cuda::launch_act_quant_dequant(x, ldx, a.x.shape[0], w.in_dim, xq, stream_);
        launched("linear");
        x = xq, ldx = w.in_dim;
    }
    run_linear(x, ldx, w, f32m(a.y), ld(a.y), a.x.shape[0], kLinearEnum[v]);
}

void CudaBackend::run_linear(const float* x, int64_t ldx, const WeightRef& w, float* y, int64_t ldy,
                             int64_t n, cuda::LinearVariant v) {
    if (v == cuda::LinearVariant::kMma) {
        cuda::launch_linear_mma(x, ldx, w, y, ldy, n, scratch_, stream_);
    } else if (v == cuda::LinearVariant::kGemm) {
        cuda::launch_linear_gemm(x, ldx, w, y, ldy, n, scratch_, stream_);
    } else if (v == cuda::LinearVariant::kCublasLtBf16x3) {
        void* tmp = scratch_.get(7, cuda::LtBf16x3Gemm::tmp_bytes(n, w.in_dim, w.out_dim));
        const bool ran = cuda::LtBf16x3Gemm::instance()->run(x, ldx, w.data, w.ld, n, w.in_dim, w.out_dim, y,
                                                             ldy, tmp, stream_);
        DI_CHECK(ran, "linear: cuBLASLt BF16 matmul failed for n {}, weight [{}, {}] (scope '{}')", n,
                 w.out_dim, w.in_dim, scope_);
    } else
        cuda::launch_linear(x, ldx, w, y, ldy, n, stream_, v);
    launched("linear");
}

CudaBackend::LtInput CudaBackend::lt_quantise(const float* x, int64_t ldx, int64_t n, int64_t width,
                                              bool pad) {
    const int64_t rows = pad ? cuda::lt_rows(n) : n;
    const size_t q_bytes = (size_t(rows * width) + 255) / 256 * 256,
                 sx_bytes = size_t(rows * (width / 128)) * 4;
    auto* q = static_cast<uint8_t*>(scratch_.get(14, q_bytes + sx_bytes));
    auto* sx = reinterpret_cast<float*>(q + q_bytes);
    if (rows != n)
        DI_CUDA_CHECK(cudaMemsetAsync(q, 0, q_bytes + sx_bytes, stream()));  // the padding rows: zeros
    cuda::launch_act_quant_fp8(x, ldx, n, width, q, sx, rows, stream_);
    return {x, q, sx, width, rows};
}

void CudaBackend::linear_lt_fp8(const LinearArgs& a, const WeightRef& w, const LtInput* in) {
    const int64_t n = a.x.shape[0], kb = w.in_dim / 128, ob = w.out_dim / 128, ld_sw = cuda::lt_scale_ld(kb);
    const LtInput own = in ? LtInput{} : lt_quantise(f32(a.x), ld(a.x), n, w.in_dim);
    if (!in) in = &own;
    const size_t sw_bytes = (size_t(ob * ld_sw) * 4 + 255) / 256 * 256;
    auto* base = static_cast<uint8_t*>(scratch_.get(7, sw_bytes + size_t(in->rows * w.out_dim) * 4));
    const float* sw = reinterpret_cast<const float*>(w.scale);
    if (w.scale_e8m0 || w.ld_scale != ld_sw || reinterpret_cast<uintptr_t>(w.scale) % 16 != 0) {
        auto* wide = reinterpret_cast<float*>(base);  // f32, rows of 16-byte multiples
        cuda::launch_scales_to_f32(w.scale, w.scale_e8m0, w.ld_scale, ob, kb, wide, ld_sw, stream_);
        sw = wide;
    }
    cuda::LtFp8Gemm* lt = cuda::LtFp8Gemm::instance();
    const bool ran = a.y.dtype == DType::kBF16
                         ? lt->run_bf16(in->q, in->sx, w.data, w.ld, sw, n, w.in_dim, w.out_dim,
                                        a.y.ptr<uint16_t>(), ld(a.y), base + sw_bytes, stream_, in->ldq)
                         : lt->run(in->q, in->sx, w.data, w.ld, sw, n, w.in_dim, w.out_dim, f32m(a.y),
                                   ld(a.y), base + sw_bytes, stream_, in->ldq);
    DI_CHECK(ran, "linear: cuBLASLt FP8 matmul failed for n {}, weight [{}, {}] (scope '{}')", n, w.out_dim,
             w.in_dim, scope_);
    launched("linear");
}

void CudaBackend::linear_fp8mma(const LinearArgs& a, const WeightRef& w, const LtInput* in) {
    const int64_t n = a.x.shape[0];
    if (!in && n <= cuda::kLinearFp8MmaQuantRows) {  // quantised in the kernel
        cuda::launch_linear_fp8mma(nullptr, 0, nullptr, 0, f32(a.x), ld(a.x), w, f32m(a.y), ld(a.y), n,
                                   stream_);
    } else {
        const LtInput own = in ? LtInput{} : lt_quantise(f32(a.x), ld(a.x), n, w.in_dim, false);
        if (!in) in = &own;
        cuda::launch_linear_fp8mma(in->q, in->ldq, in->sx, in->rows, nullptr, 0, w, f32m(a.y), ld(a.y), n,
                                   stream_);
    }
    launched("linear");
}

// The inputs of a linears call's quantised-input jobs (cuBLASLt's and fp8_mma's) as one quantised block, when
// they are columns of the same rows (the same n and row stride) that together cover one 128-aligned span
// without gaps: wq_a and wkv read the same y, the shared expert's w1 and w3 too, wo_a's groups each its
// columns of o. Per-row 128-blocks make the span's quantised columns those of each job's own input. Empty
// where the jobs do not form one span.
std::optional<CudaBackend::LtInput> CudaBackend::lt_shared_input(std::span<const LinearArgs> jobs,
                                                                 std::span<const WeightRef> w,
                                                                 const std::vector<bool>& lt,
                                                                 const std::vector<bool>& fp8mma) {
    std::vector<size_t> idx;
    for (size_t i = 0; i < jobs.size(); ++i)
        if (lt[i]) idx.push_back(i);
    if (idx.size() < 2) return std::nullopt;
    const int64_t n = jobs[idx[0]].x.shape[0], ldx = ld(jobs[idx[0]].x);
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return f32(jobs[a].x) < f32(jobs[b].x); });
    const float* lo = f32(jobs[idx[0]].x);
    const float* hi = lo;
    for (size_t i : idx) {
        const float* x = f32(jobs[i].x);
        if (jobs[i].x.shape[0] != n || ld(jobs[i].x) != ldx || x > hi || (x - lo) % 128 != 0)
            return std::nullopt;
        hi = std::max(hi, x + w[i].in_dim);
    }
    const int64_t width = hi - lo, rows = cuda::lt_rows(n);
    if (width > ldx && n > 1) return std::nullopt;  // rows of the span would overlap the next row's
    // each job's q and scales 256-byte aligned, as cuBLASLt's algorithms assume by default (lt_fp8_takes)
    for (size_t i : idx) {
        const int64_t c = f32(jobs[i].x) - lo;
        if (c % 256 != 0 || (c / 128 * rows * 4) % 256 != 0) return std::nullopt;
    }
    bool any_lt = false;
    for (size_t i : idx) {
        if (fp8mma[i]) continue;  // reads any row stride that is a multiple of 16
        any_lt = true;
        if (!cuda::LtFp8Gemm::instance()->supports(n, w[i].in_dim, w[i].out_dim, w[i].ld, ld(jobs[i].y),
                                                   nullptr, nullptr, width))
            return std::nullopt;
    }
    return lt_quantise(lo, ldx, n, width, any_lt);
}

void CudaBackend::linears(std::span<const LinearArgs> jobs) {
    if (replaying()) return;
    // pre-quantised inputs (each reads its own codes) and bf16 outputs one by one; the rest together as below
    const auto alone = [](const LinearArgs& a) {
        return a.x.dtype == DType::kF8E4M3 || a.y.dtype == DType::kBF16;
    };
    if (std::any_of(jobs.begin(), jobs.end(), alone)) {
        std::vector<LinearArgs> rest;
        for (const LinearArgs& a : jobs) alone(a) ? linear(a) : rest.push_back(a);
        if (!rest.empty()) linears(rest);
        return;
    }
    // Jobs split_rows can share a launch with (same format, in_dim and n) go together; the rest run alone.
    std::vector<WeightRef> w(jobs.size());
    std::vector<cuda::SplitJob> sj(jobs.size());
    std::vector<int> peers(jobs.size(), 0);
    // fp8 activation blocks: the jobs cuBLASLt takes run alone (their inputs quantised once where they are
    // columns of the same rows: lt_shared_input); split_rows (and stream_gemv where act_quant_in_kernels())
    // quantise their x in the kernel; the others' inputs are dequantised into one scratch buffer.
    std::vector<bool> done(jobs.size(), false), lt(jobs.size(), false), fm(jobs.size(), false);
    size_t xq_floats = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
        const LinearArgs& a = jobs[i];
        check(a);
        device_args(a, "linear");
        w[i] = weight_ref(a.w, "linear.w");
        if (a.act != ActQuant::kFp8Block128) continue;
        // lt: the jobs that read the quantiser's copy (fp8_mma quantises a few rows itself)
        const int v = linear_v_.pick(LinearTakes{a, w[i], false});
        fm[i] = v == kLinearFp8Mma;
        lt[i] = fm[i] ? a.x.shape[0] > cuda::kLinearFp8MmaQuantRows : v == kLinearLtFp8;
        if (!lt[i] && !fm[i]) xq_floats += size_t(a.x.shape[0] * a.w.in_dim);
    }
    float* xq = xq_floats ? static_cast<float*>(scratch_.get(6, xq_floats * sizeof(float))) : nullptr;
    const std::optional<LtInput> shared = lt_shared_input(jobs, w, lt, fm);
    for (size_t i = 0; i < jobs.size(); ++i) {
        const LinearArgs& a = jobs[i];
        sj[i] = {f32(a.x), ld(a.x), w[i], f32m(a.y), ld(a.y)};
        if (lt[i] || fm[i]) {
            linear_v_.count_dispatch(fm[i] ? kLinearFp8Mma : kLinearLtFp8);
            const bool from_shared = lt[i] && shared;  // the shared span holds the lt jobs' inputs
            const LtInput in = from_shared ? shared->from(f32(a.x)) : LtInput{};
            if (fm[i])
                linear_fp8mma(a, w[i], from_shared ? &in : nullptr);
            else
                linear_lt_fp8(a, w[i], from_shared ? &in : nullptr);
            done[i] = true;
            continue;
        }
        // A job of the native precision quantises its x in the split-row kernel's registers, or else below
        // into a dequantised copy for the other kernels.
        sj[i].quant = a.act == ActQuant::kFp8Block128;
        if (!cuda::gemv_split_supported(sj[i].x, sj[i].ldx, w[i], a.x.shape[0])) continue;
        for (size_t j = 0; j < i; ++j)
            if (peers[j] > 0 && jobs[j].x.shape[0] == a.x.shape[0] &&
                cuda::gemv_split_same_launch(sj[j], sj[i]))
                ++peers[j], ++peers[i];
        ++peers[i];  // itself
    }
    cuda::SplitJobs batch;
    int64_t batch_n = 0;
    auto flush = [&] {
        if (batch.count == 0) return;
        cuda::launch_gemv_split(batch, batch_n, stream_);
        launched("linear");
        batch.count = 0;
    };
    std::vector<int> var(jobs.size(), -1);
    for (size_t i = 0; i < jobs.size(); ++i)
        if (!done[i]) var[i] = choose_linear(jobs[i], w[i], peers[i] > 1);
    for (size_t i = 0; i < jobs.size(); ++i) {
        if (done[i]) continue;
        const int64_t n = jobs[i].x.shape[0];
        const int v = var[i];
        if (kLinearEnum[v] == cuda::LinearVariant::kCublasLtBf16x3 && bf16x3_shared(jobs, w, var, done, i))
            continue;
        if (sj[i].quant && kLinearEnum[v] == cuda::LinearVariant::kStreamGemv &&
            cuda::act_quant_in_kernels()) {  // quantised where staged
            cuda::launch_gemv(sj[i].x, sj[i].ldx, w[i], sj[i].y, sj[i].ldy, n, stream_, true);
            launched("linear");
            continue;
        }
        if (kLinearEnum[v] != cuda::LinearVariant::kSplitRows) {
            if (sj[i].quant) {
                cuda::launch_act_quant_dequant(sj[i].x, sj[i].ldx, n, w[i].in_dim, xq, stream_);
                launched("linear");
                sj[i].x = xq, sj[i].ldx = w[i].in_dim, sj[i].quant = false;
                xq += n * w[i].in_dim;
            }
            run_linear(sj[i].x, sj[i].ldx, w[i], sj[i].y, sj[i].ldy, n, kLinearEnum[v]);
            continue;
        }
        if (batch.count == cuda::kSplitMaxJobs ||
            (batch.count > 0 && (n != batch_n || !cuda::gemv_split_same_launch(batch.job[0], sj[i]))))
            flush();
        batch.job[batch.count++] = sj[i];
        batch_n = n;
    }
    flush();
}

bool CudaBackend::bf16x3_shared(std::span<const LinearArgs> jobs, std::span<const WeightRef> w,
                                std::span<const int> var, std::vector<bool>& done, size_t i) {
    if (!cuda::bf16x3_share()) return false;
    const LinearArgs& a = jobs[i];
    const int64_t n = a.x.shape[0], in = w[i].in_dim;
    // Jobs whose rows go in the same chunks as alone, so each gets linear()'s bits: all in one chunk, or
    // chunks of one size.
    const int64_t ci = cuda::LtBf16x3Gemm::chunk_rows(w[i].out_dim);
    std::vector<size_t> idx;
    std::vector<cuda::LtBf16x3Gemm::Out> outs;
    for (size_t j = i; j < jobs.size(); ++j) {
        const LinearArgs& b = jobs[j];
        const int64_t cj = cuda::LtBf16x3Gemm::chunk_rows(w[j].out_dim);
        if (done[j] || kLinearEnum[var[j]] != cuda::LinearVariant::kCublasLtBf16x3 || b.x.data != a.x.data ||
            b.x.shape[0] != n || ld(b.x) != ld(a.x) || w[j].in_dim != in ||
            !((n <= ci && n <= cj) || ci == cj))
            continue;
        idx.push_back(j);
        outs.push_back({.w = w[j].data, .ldw = w[j].ld, .out = w[j].out_dim, .y = f32m(b.y), .ldy = ld(b.y)});
    }
    cuda::LtBf16x3Gemm* lt = cuda::LtBf16x3Gemm::instance();
    if (outs.size() < 2 || !lt->supports(n, in, outs.data(), outs.size())) return false;
    void* tmp = scratch_.get(7, cuda::LtBf16x3Gemm::tmp_bytes(n, in, outs.data(), outs.size()));
    DI_CHECK(lt->run(f32(a.x), ld(a.x), n, in, outs.data(), outs.size(), tmp, stream_),
             "linear: cuBLASLt BF16 matmul failed for n {}, {} weights of {} columns (scope '{}')", n,
             outs.size(), in, scope_);
    for (const size_t j : idx) done[j] = true;  // choose() counted each
    launched("linear");
    return true;
}

void CudaBackend::rms_norm(const RmsNormArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "rms_norm");
    need_f32_rows(a.x, "rms_norm.x"), need_f32_rows(a.y, "rms_norm.y");
    DI_CHECK(a.weight.empty() || a.weight.is_contiguous(), "rms_norm.weight {}", a.weight.describe());
    cuda::launch_rms_norm(f32(a.x), ld(a.x), a.weight.data,
                          a.weight.empty() ? Fdt::kF32 : fdt(a.weight.dtype, "rms_norm.weight"), f32m(a.y),
                          ld(a.y), a.x.shape[0], a.x.shape[1], a.eps, stream_);
    launched("rms_norm");
}

void CudaBackend::rope(const RopeArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "rope");
    need_f32_rows(a.x, "rope.x");
    DI_CHECK(a.positions.is_contiguous() && a.inv_freq.is_contiguous(), "rope: positions/inv_freq layout");
    cuda::RopeParams p{.x = f32m(a.x),
                       .s0 = a.x.stride[0],
                       .s1 = a.x.stride[1],
                       .n = a.x.shape[0],
                       .heads = a.x.shape[1],
                       .hd = a.x.shape[2],
                       .pos = a.positions.ptr<int32_t>(),
                       .inv_freq = f32(a.inv_freq),
                       .half = a.inv_freq.numel(),
                       .mscale = a.mscale,
                       .inverse = a.inverse};
    cuda::launch_rope(p, stream_);
    launched("rope");
}

// The codes' rows of stride in and block-major scales (stride[0] 1), as launch_act_quant_fp8 writes them and
// cuBLASLt reads them.
void CudaBackend::act_quant(const ActQuantArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "act_quant");
    const int64_t n = a.x.shape[0], in = a.x.shape[1];
    DI_CHECK(n <= 1 || (a.q.stride[0] == in && a.scales.stride[0] == 1),
             "act_quant: cuda writes code rows of stride {} and block-major scales, got q {} scales {}", in,
             a.q.describe(), a.scales.describe());
    cuda::launch_act_quant_fp8(f32(a.x), ld(a.x), n, in, a.q.ptr<uint8_t>(), f32m(a.scales),
                               a.scales.stride[1], stream_);
    launched("act_quant");
}

void CudaBackend::argmax(const ArgmaxArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "argmax");
    need_f32_rows(a.x, "argmax.x");
    cuda::launch_argmax(f32(a.x), ld(a.x), a.x.shape[0], a.x.shape[1], a.ids.ptr<int32_t>(),
                        a.bad.ptr<int32_t>(), stream_);
    launched("argmax");
}

void CudaBackend::top_candidates(const TopCandidatesArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "top_candidates");
    need_f32_rows(a.x, "top_candidates.x");
    DI_CHECK(a.ids.shape[1] <= cuda::kTopCandidatesMax, "top_candidates: {} a row, at most {}",
             a.ids.shape[1], cuda::kTopCandidatesMax);
    cuda::launch_top_candidates(f32(a.x), ld(a.x), a.x.shape[0], a.x.shape[1], a.temperature.ptr<float>(),
                                a.ids.ptr<int32_t>(), a.values.ptr<float>(), a.ids.shape[1],
                                reinterpret_cast<double*>(a.sums.ptr<int64_t>()), a.bad.ptr<int32_t>(),
                                stream_);
    launched("top_candidates");
}

void CudaBackend::route(const RouteArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "route");
    DI_CHECK(a.ids.shape[1] <= 64, "route: k {} above 64", a.ids.shape[1]);
    const bool hash = !a.tid2eid.empty();
    if (hash)
        DI_CHECK(a.tid2eid.dtype == DType::kI64 || a.tid2eid.dtype == DType::kI32, "route.tid2eid dtype {}",
                 dtype_name(a.tid2eid.dtype));
    cuda::RouteParams p{.logits = f32(a.logits),
                        .ld_logits = ld(a.logits),
                        .bias = a.bias.empty() ? nullptr : f32(a.bias),
                        .tid2eid = hash ? a.tid2eid.data : nullptr,
                        .tid_i64 = hash && a.tid2eid.dtype == DType::kI64,
                        .ld_tid = ld(a.tid2eid),
                        .vocab = hash ? a.tid2eid.shape[0] : 0,
                        .tokens = hash ? a.tokens.ptr<int32_t>() : nullptr,
                        .ids = a.ids.ptr<int32_t>(),
                        .ld_ids = ld(a.ids),
                        .weights = f32m(a.weights),
                        .ld_weights = ld(a.weights),
                        .n = a.logits.shape[0],
                        .E = a.logits.shape[1],
                        .k = a.ids.shape[1],
                        .sigmoid = a.func == ScoreFunc::kSigmoid,
                        .scaling = a.scaling};
    cuda::launch_route(p, stream_);
    launched("route");
}

}  // namespace di::ops::cuda_impl
