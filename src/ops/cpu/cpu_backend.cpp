// CpuBackend construction and the linear op: tiles of kTileRows weight rows, each dequantised once and
// reused for every input row, spread over the pool by output rows.
#include "ops/cpu/cpu_backend.h"

#include <algorithm>

#include "ops/act_quant.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/ref/ref_backend.h"

namespace di::ops {

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads), ref_(make_ref_backend()) {
    scratch_.resize(size_t(pool_.size()));
}

CpuBackend::~CpuBackend() = default;

std::string CpuBackend::hardware() const {
    std::string s = std::to_string(pool_.size()) + (pool_.size() == 1 ? " thread" : " threads");
#if defined(__x86_64__)
    const bool bf16 = __builtin_cpu_supports("avx512bf16");
    s += __builtin_cpu_supports("avx512f") ? (bf16 ? ", AVX-512 BF16" : ", AVX-512")
         : __builtin_cpu_supports("avx2")  ? ", AVX2"
                                           : ", baseline x86-64";
#endif
    s += cpu::amx_enabled() ? ", AMX tiles (a sequence's chunks of " + std::to_string(cpu::kAmxMinRows) +
                                  "+ rows; DEEPINFER_CPU_AMX=0 turns them off)"
                            : ", no AMX tiles";
    return s;
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return std::make_unique<CpuBackend>(n_threads); }

namespace {
// bf16 planes of x on the AMX tiles: quantised rows are exact in one, f32 rows take three
int planes_of(ActQuant act) { return act == ActQuant::kFp8Block128 ? 1 : 3; }

constexpr std::string_view kAllOps[] = {
    "embed",        "cast",      "add",          "swiglu",  "linear",   "rms_norm", "rope",  "compress",
    "indexer_topk", "attention", "window_store", "mhc_pre", "mhc_post", "hc_head",  "route", "moe"};
}  // namespace

std::vector<KernelVariant> CpuBackend::kernel_variants() const {
    std::vector<KernelVariant> v;
    for (std::string_view op : kAllOps) {
        if (cpu_op_is_fast(op))
            v.push_back(
                {std::string(op), std::string(kCpuSimd), "any shape (case tables in tests/ops)", false});
        v.push_back({std::string(op), std::string(kCpuRef), "any shape (the reference code)", true});
    }
    return v;
}

void CpuBackend::set_allow_list(const AllowList& l) {
    for (size_t i = 0; i < fast_.size(); ++i) fast_[i].allowed = l.allows(kCpuFastOps[i], kCpuSimd);
}

int64_t CpuBackend::dispatch_count(std::string_view op, std::string_view variant) const {
    const int i = cpu_fast_index(op);
    if (i < 0) return 0;
    return variant == kCpuSimd  ? fast_[size_t(i)].n_simd.load()
           : variant == kCpuRef ? fast_[size_t(i)].n_ref.load()
                                : 0;
}

bool CpuBackend::force_variant(std::string_view op, std::string_view variant) {
    const int i = cpu_fast_index(op);
    if (i < 0) return variant.empty() || variant == kCpuRef;
    if (variant.empty()) return fast_[size_t(i)].forced = -1, true;
    if (variant == kCpuSimd || variant == kCpuRef) return fast_[size_t(i)].forced = variant == kCpuSimd, true;
    return false;
}

void CpuBackend::linear(const LinearArgs& in_args) {
    if (in_args.y.dtype == DType::kBF16) {  // the f32 call (dispatched as any), rounded
        check(in_args);
        linear_via_f32(in_args, [&](const LinearArgs& f) { linear(f); });
        return;
    }
    if (!take_fast(cpu_fast_index("linear"))) return ref_->linear(in_args);
    check(in_args);
    LinearArgs a = in_args;
    if (a.x.shape[0] == 0 || a.w.out_dim == 0) return;
    if (a.x.dtype == DType::kF8E4M3)  // quantised beforehand: the same values as quantised here
        a.x = fp8_block_dequant(a.x, a.x_scales, xq_);
    else if (a.act == ActQuant::kFp8Block128)
        a.x = quantise_rows(a.x);
    if (cpu::amx_supported(a.w))  // AMX tiles (cpu_amx.cpp) for the row groups of enough rows
        return cpu::for_each_kernel_run(a.row_groups, a.x.shape[0], cpu::kAmxMinRows,
                                        [&](int64_t r0, int64_t rows, bool amx) {
                                            LinearArgs part = a;
                                            part.x = a.x.rows(r0, rows), part.y = a.y.rows(r0, rows);
                                            amx ? linear_amx(part) : linear_tiles(part);
                                        });
    linear_tiles(a);
}

// fp8_block_quant_dequant's rows (each alone: the same bits), spread over the pool.
TensorView CpuBackend::quantise_rows(const TensorView& x) {
    const int64_t n = x.shape[0], in = x.shape[1];
    xq_.resize(size_t(n * in));
    pool_.parallel_for(n, n * in < cpu::kMinParallelMacs ? n : 1, [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r)
            cpu::fp8_quant_dequant_row(x.ptr<float>() + r * x.stride[0], in, xq_.data() + r * in);
    });
    return TensorView::contiguous(xq_.data(), DType::kF32, {n, in});
}

void CpuBackend::linear_amx(const LinearArgs& a) {
    const int64_t n = a.x.shape[0], in = a.w.in_dim, out = a.w.out_dim;
    xrows_.resize(size_t(n));
    for (int64_t r = 0; r < n; ++r) xrows_[size_t(r)] = a.x.ptr<float>() + r * a.x.stride[0];
    const int planes = planes_of(a.act);
    xbf_.resize(size_t(planes * n * in));
    // the token groups prepared over the pool, their exponent ranges merged
    const int64_t groups = (n + 15) / 16;
    std::vector<cpu::AmxX>& part = amx_ranges_;
    part.assign(size_t(groups), cpu::AmxX{});
    pool_.parallel_for(groups, n * in < cpu::kMinParallelMacs ? groups : 1, [&](int64_t g0, int64_t g1, int) {
        for (int64_t g = g0; g < g1; ++g)
            part[size_t(g)] =
                cpu::amx_prepare_x(a.w, xrows_.data(), n, planes, xbf_.data(), 16 * g, 16 * g + 16);
    });
    cpu::AmxX xr = part[0];
    for (const cpu::AmxX& p : part) xr.merge(p);
    const int64_t n_blocks = (out + cpu::kAmxRows - 1) / cpu::kAmxRows;
    const int64_t grain = cpu::tiles_per_task(n_blocks, cpu::kAmxRows * in * n, pool_.size());
    pool_.parallel_for(n_blocks, grain, [&](int64_t b0, int64_t b1, int worker) {
        const int64_t o0 = b0 * cpu::kAmxRows, o1 = std::min(out, b1 * cpu::kAmxRows);
        cpu::amx_rows(a.w, o0, o1, xbf_.data(), xr, xrows_.data(), n, a.y.ptr<float>() + o0, a.y.stride[0],
                      scratch_[size_t(worker)]);
    });
}

// Tiles of kTileRows weight rows against every x row (x already quantised for the native precision).
void CpuBackend::linear_tiles(const LinearArgs& a) {
    const int64_t n = a.x.shape[0], in = a.w.in_dim, out = a.w.out_dim;
    xrows_.resize(size_t(n));
    for (int64_t r = 0; r < n; ++r) xrows_[size_t(r)] = a.x.ptr<float>() + r * a.x.stride[0];
    // native FP8: the quantised rows as bf16 in the kernel's order (cpu_native_fp8.cpp)
    const bool bf16_dots = a.act == ActQuant::kFp8Block128 && cpu::native_fp8_supported(a.w);
    if (bf16_dots) {
        xbf_.resize(size_t(n * in));
        xbf_rows_.resize(size_t(n));
        for (int64_t r = 0; r < n; ++r) {
            xbf_rows_[size_t(r)] = xbf_.data() + r * in;
            cpu::native_fp8_prepare_x(xrows_[size_t(r)], in, xbf_.data() + r * in);
        }
    }
    const int64_t n_tiles = (out + cpu::kTileRows - 1) / cpu::kTileRows;
    const int64_t grain = cpu::tiles_per_task(n_tiles, cpu::kTileRows * in * n, pool_.size());
    pool_.parallel_for(n_tiles, grain, [&](int64_t t0, int64_t t1, int worker) {
        CpuScratch& s = scratch_[size_t(worker)];
        if (s.acc.size() < size_t(n * cpu::kTileRows)) s.acc.resize(size_t(n * cpu::kTileRows));
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t o0 = t * cpu::kTileRows, nw = std::min<int64_t>(cpu::kTileRows, out - o0);
            if (bf16_dots)
                cpu::native_fp8_tile(a.w, o0, nw, xbf_rows_.data(), n, s.acc.data());
            else
                cpu::weight_tile(a.w, o0, nw, xrows_.data(), n, s, s.acc.data());
            for (int64_t r = 0; r < n; ++r) {
                float* y = a.y.ptr<float>() + r * a.y.stride[0] + o0;
                for (int64_t k = 0; k < nw; ++k) y[k] = s.acc[size_t(r * cpu::kTileRows + k)];
            }
        }
    });
}

}  // namespace di::ops
