// Routed experts on the CPU: token-slot pairs grouped by expert, so each expert's rows are dequantised once
// per call and reused for all its tokens. Phase 1: h = swiglu(W1 x, W3 x) per pair; phase 2: d = W2 h per
// pair; phase 3: out[t] = sum over slots j (in slot order) of weights[t, j] * d[t, j]. Expert parallelism
// (MoeArgs::Pass) runs phases 1-2 for some experts into the slots, and phase 3 alone from them.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "ops/act_quant.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/cpu_kernels.h"

namespace di::ops {
namespace {

// As ref swiglu (transformers DeepseekV4Experts._apply_gate), from float gate/up sums. Results below
// FLT_MIN (silu of a large negative gate) are flushed to 0: as inputs of the down projection, subnormal
// floats cost a ~100-cycle microcode assist per vector (3.6x slower FP4 MoE on random weights), and the
// flush changes an output by at most 2^-126 sum_r |W2[c, r]| (tests/ops/cpu_moe_test.cpp bounds it).
float swiglu_one(float g, float u, float limit) {
    const float gc = std::min(g, limit), uc = std::clamp(u, -limit, limit);
    const float h = float(double(gc) / (1.0 + std::exp(-double(gc))) * double(uc));
    return std::fabs(h) < FLT_MIN ? 0.0f : h;
}

}  // namespace

void CpuBackend::moe(const MoeArgs& a) {
    if (!take_fast(cpu_fast_index("moe"))) return ref_->moe(a);
    check(a);
    const int64_t n = a.x.shape[0], E = a.n_experts;
    if (n == 0) return;
    if (a.pass == MoeArgs::Pass::kCombine) return combine(a, a.slots.ptr<float>());
    const ExpertWeights* placed = a.experts;  // a placed expert: the experts share one format
    while (placed + 1 < a.experts + E && placed->w1.empty()) ++placed;
    if (!cpu::amx_supported(placed->w1)) return moe_rows(a, false);
    // the experts on AMX tiles (cpu_amx.cpp) for the row groups of enough tokens
    const int planes = a.act == ActQuant::kFp8Block128 ? 1 : 3;
    if (!a.row_sizes.empty()) return moe_by_row_size(a, cpu::amx_min_tokens(planes));
    cpu::for_each_kernel_run(a.row_groups, n, cpu::amx_min_tokens(planes),
                             [&](int64_t r0, int64_t rows, bool amx) {
                                 MoeArgs part = a;
                                 part.x = a.x.rows(r0, rows), part.ids = a.ids.rows(r0, rows),
                                 part.weights = a.weights.rows(r0, rows);
                                 part.out = a.out.rows(r0, rows);
                                 if (!a.slots.empty()) part.slots = a.slots.rows(r0, rows);
                                 moe_rows(part, amx);
                             });
}

// Rows of interleaved groups (MoeArgs::row_sizes): each kernel class's rows gathered, computed together and
// put back (out for the one call, slots for the experts' pass).
void CpuBackend::moe_by_row_size(const MoeArgs& a, int64_t min_tokens) {
    const int64_t n = a.x.shape[0], D = a.x.shape[1], k = a.ids.shape[1];
    std::vector<int64_t> rows[2];
    for (int64_t t = 0; t < n; ++t)
        rows[a.row_sizes.ptr<int32_t>()[t * a.row_sizes.stride[0]] >= min_tokens].push_back(t);
    MoeArgs whole = a;
    whole.row_sizes = {};
    if (rows[0].empty() || rows[1].empty()) return moe_rows(whole, rows[0].empty());
    const bool slots = a.pass == MoeArgs::Pass::kExperts;
    for (int cls = 0; cls < 2; ++cls) {
        const std::vector<int64_t>& r = rows[cls];
        const int64_t m = int64_t(r.size());
        Tensor x(host_allocator(), DType::kF32, {m, D}), ids(host_allocator(), DType::kI32, {m, k}),
            w(host_allocator(), DType::kF32, {m, k}), out(host_allocator(), DType::kF32, {m, D}),
            sl(host_allocator(), DType::kF32, {slots ? m : 0, k, D});
        for (int64_t i = 0; i < m; ++i) {
            std::copy_n(a.x.ptr<float>() + r[size_t(i)] * a.x.stride[0], D, x.view().ptr<float>() + i * D);
            for (int64_t j = 0; j < k; ++j) {
                ids.view().ptr<int32_t>()[i * k + j] =
                    a.ids.ptr<int32_t>()[r[size_t(i)] * a.ids.stride[0] + j];
                w.view().ptr<float>()[i * k + j] =
                    a.weights.ptr<float>()[r[size_t(i)] * a.weights.stride[0] + j];
            }
        }
        MoeArgs part = whole;
        part.x = x.view(), part.ids = ids.view(), part.weights = w.view(), part.out = out.view();
        if (slots) part.slots = sl.view();
        moe_rows(part, cls == 1);
        for (int64_t i = 0; i < m; ++i) {
            if (slots)
                std::copy_n(sl.view().ptr<float>() + i * k * D, k * D,
                            a.slots.ptr<float>() + r[size_t(i)] * k * D);
            else
                std::copy_n(out.view().ptr<float>() + i * D, D,
                            a.out.ptr<float>() + r[size_t(i)] * a.out.stride[0]);
        }
    }
}

void CpuBackend::moe_rows(const MoeArgs& a, bool amx) {
    const int64_t n = a.x.shape[0], D = a.x.shape[1], k = a.ids.shape[1], E = a.n_experts;
    // Group the pairs p = t * k + j by expert (counting sort: token order within an expert); with
    // Pass::kExperts only the pairs of the given experts, the others' slots zeroed.
    moe_offsets_.assign(size_t(E + 1), 0);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < k; ++j) {
            const int32_t e = a.ids.ptr<int32_t>()[t * a.ids.stride[0] + j];
            DI_CHECK(e >= 0 && e < E, "expert id {} outside {}", e, E);
            if (a.owns(e))
                ++moe_offsets_[size_t(e + 1)];
            else
                std::fill_n(a.slots.ptr<float>() + (t * k + j) * D, D, 0.0f);
        }
    for (int64_t e = 0; e < E; ++e) moe_offsets_[size_t(e + 1)] += moe_offsets_[size_t(e)];
    const bool quant = a.act == ActQuant::kFp8Block128;
    // native FP4 experts on bf16 dot products (cpu_native_fp4.cpp) where the machine and the weights allow
    auto bf16_dots = [&](const QWeight& w) { return quant && cpu::native_fp4_supported(w); };
    const ExpertWeights* placed = a.experts;  // a placed expert: the experts share one format
    while (placed + 1 < a.experts + E && placed->w1.empty()) ++placed;
    const bool amx_up = amx && cpu::amx_supported(placed->w1) && cpu::amx_supported(placed->w3);
    const bool amx_down = amx && cpu::amx_supported(placed->w2);
    const int planes = quant ? 1 : 3;  // x and h: quantised rows are exact in bf16, f32 rows split in three
    const bool bf16_x = !amx_up && bf16_dots(placed->w1) && bf16_dots(placed->w3);  // the up products' kernel
    if (quant) {  // the tokens' rows quantised once, read by every slot (and as bf16 by the native kernel)
        moe_xq_.resize(size_t(n * D));
        moe_xbf_.resize(bf16_x ? size_t(n * D) : 0);
        pool_.parallel_for(n, n * D < cpu::kMinParallelMacs ? n : 1, [&](int64_t t0, int64_t t1, int) {
            for (int64_t t = t0; t < t1; ++t) {
                cpu::fp8_quant_dequant_row(a.x.ptr<float>() + t * a.x.stride[0], D, moe_xq_.data() + t * D);
                if (bf16_x) cpu::native_fp4_prepare_x(moe_xq_.data() + t * D, D, moe_xbf_.data() + t * D);
            }
        });
    }
    moe_pairs_.resize(size_t(n * k));
    xrows_.resize(size_t(n * k));
    moe_xbf_rows_.resize(size_t(n * k));
    moe_hrows_.resize(size_t(n * k));
    moe_cursor_.assign(moe_offsets_.begin(), moe_offsets_.end() - 1);
    int64_t I = 0;  // widest moe_dim among the used experts: row stride of h
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < k; ++j) {
            const int32_t e = a.ids.ptr<int32_t>()[t * a.ids.stride[0] + j];
            if (!a.owns(e)) continue;
            const int64_t slot = moe_cursor_[size_t(e)]++;
            moe_pairs_[size_t(slot)] = t * k + j;
            xrows_[size_t(slot)] = quant ? moe_xq_.data() + t * D : a.x.ptr<float>() + t * a.x.stride[0];
            moe_xbf_rows_[size_t(slot)] = bf16_x ? moe_xbf_.data() + t * D : nullptr;
            const ExpertWeights& ew = a.experts[e];
            DI_CHECK(ew.w1.in_dim == D && ew.w3.in_dim == D && ew.w3.out_dim == ew.w1.out_dim &&
                         ew.w2.out_dim == D && ew.w2.in_dim == ew.w1.out_dim,
                     "moe: expert {} shapes w1 [{}, {}] w3 [{}, {}] w2 [{}, {}] for hidden {}", e,
                     ew.w1.out_dim, ew.w1.in_dim, ew.w3.out_dim, ew.w3.in_dim, ew.w2.out_dim, ew.w2.in_dim,
                     D);
            I = std::max(I, ew.w1.out_dim);
        }
    const int64_t used = moe_offsets_[size_t(E)];  // pairs computed here
    moe_h_.resize(size_t(n * k * I));
    moe_d_.resize(a.pass == MoeArgs::Pass::kExperts ? 0 : size_t(n * k * D));
    float* dout = a.pass == MoeArgs::Pass::kExperts ? a.slots.ptr<float>() : moe_d_.data();  // [n * k, D]
    for (int64_t s = 0; s < used; ++s) moe_hrows_[size_t(s)] = moe_h_.data() + moe_pairs_[size_t(s)] * I;
    if (quant) {  // h's quantised rows as bf16 for the native kernel, in pair order like moe_h_
        moe_hbf_.resize(size_t(n * k * I));
        moe_hbf_rows_.resize(size_t(used));
        for (int64_t s = 0; s < used; ++s)
            moe_hbf_rows_[size_t(s)] = moe_hbf_.data() + moe_pairs_[size_t(s)] * I;
    }

    // The AMX tiles' token rows, per expert at its first pair's place (x's width D, h's I)
    auto prepare_amx = [&](bool down) {
        moe_xv_.resize(size_t(planes * used * (down ? I : D)));
        moe_xr_.resize(size_t(E));
        pool_.parallel_for(E, used * D < cpu::kMinParallelMacs ? E : 1, [&](int64_t e0, int64_t e1, int) {
            for (int64_t e = e0; e < e1; ++e) {  // each expert's pairs into its own part of moe_xv_
                const int64_t p0 = moe_offsets_[size_t(e)], np = moe_offsets_[size_t(e + 1)] - p0;
                if (np == 0) continue;
                const ExpertWeights& ew = a.experts[e];
                moe_xr_[size_t(e)] =
                    cpu::amx_prepare_x(down ? ew.w2 : ew.w1, (down ? moe_hrows_.data() : xrows_.data()) + p0,
                                       np, planes, moe_xv_.data() + planes * p0 * (down ? I : D));
            }
        });
    };

    // Tasks: (expert, range of weight rows), about 8 per thread over all used experts.
    auto make_tasks = [&](bool down) {
        const int64_t unit = (down ? amx_down : amx_up) ? cpu::kAmxRows : cpu::kTileRows;
        moe_tasks_.clear();
        int64_t total_rows = 0;
        for (int64_t e = 0; e < E; ++e)
            if (moe_offsets_[size_t(e + 1)] > moe_offsets_[size_t(e)])
                total_rows += down ? D : a.experts[e].w1.out_dim;
        const int64_t chunk =
            std::max<int64_t>(unit, (total_rows / (8 * int64_t(pool_.size()))) / unit * unit);
        for (int64_t e = 0; e < E; ++e) {
            if (moe_offsets_[size_t(e + 1)] == moe_offsets_[size_t(e)]) continue;
            const int64_t rows = down ? D : a.experts[e].w1.out_dim;
            for (int64_t o = 0; o < rows; o += chunk)
                moe_tasks_.push_back({int32_t(e), o, std::min(rows, o + chunk)});
        }
    };
    const int64_t macs = n * k * I * D;  // per phase
    const int64_t grain = macs < cpu::kMinParallelMacs ? int64_t(1) << 40 : 1;

    make_tasks(false);
    if (amx_up) prepare_amx(false);
    pool_.parallel_for(int64_t(moe_tasks_.size()), grain, [&](int64_t b, int64_t end, int worker) {
        CpuScratch& s = scratch_[size_t(worker)];
        for (int64_t ti = b; ti < end; ++ti) {
            const MoeTask& task = moe_tasks_[size_t(ti)];
            const ExpertWeights& ew = a.experts[task.expert];
            const int64_t p0 = moe_offsets_[size_t(task.expert)],
                          np = moe_offsets_[size_t(task.expert + 1)] - p0;
            if (amx_up) {
                const int64_t nr = task.o1 - task.o0;
                s.rows.resize(size_t(2 * np * nr));
                float *g = s.rows.data(), *u = s.rows.data() + np * nr;
                const uint16_t* xv = moe_xv_.data() + planes * p0 * D;
                const cpu::AmxX xr = moe_xr_[size_t(task.expert)];
                cpu::amx_rows(ew.w1, task.o0, task.o1, xv, xr, xrows_.data() + p0, np, g, nr, s);
                cpu::amx_rows(ew.w3, task.o0, task.o1, xv, xr, xrows_.data() + p0, np, u, nr, s);
                for (int64_t q = 0; q < np; ++q) {
                    float* h = moe_h_.data() + moe_pairs_[size_t(p0 + q)] * I + task.o0;
                    for (int64_t c = 0; c < nr; ++c) h[c] = swiglu_one(g[q * nr + c], u[q * nr + c], a.limit);
                }
                continue;
            }
            if (s.acc.size() < size_t(2 * np * cpu::kTileRows)) s.acc.resize(size_t(2 * np * cpu::kTileRows));
            float *g = s.acc.data(), *u = s.acc.data() + np * cpu::kTileRows;
            for (int64_t o0 = task.o0; o0 < task.o1; o0 += cpu::kTileRows) {
                const int64_t nw = std::min<int64_t>(cpu::kTileRows, task.o1 - o0);
                if (bf16_x && bf16_dots(ew.w1) && bf16_dots(ew.w3)) {
                    cpu::native_fp4_tile(ew.w1, o0, nw, moe_xbf_rows_.data() + p0, np, g);
                    cpu::native_fp4_tile(ew.w3, o0, nw, moe_xbf_rows_.data() + p0, np, u);
                } else {
                    cpu::weight_tile(ew.w1, o0, nw, xrows_.data() + p0, np, s, g);
                    cpu::weight_tile(ew.w3, o0, nw, xrows_.data() + p0, np, s, u);
                }
                for (int64_t q = 0; q < np; ++q) {
                    float* h = moe_h_.data() + moe_pairs_[size_t(p0 + q)] * I + o0;
                    for (int64_t c = 0; c < nw; ++c)
                        h[c] = swiglu_one(g[q * cpu::kTileRows + c], u[q * cpu::kTileRows + c], a.limit);
                }
            }
        }
    });

    if (quant)  // the used pairs' h rows, in place (each row alone: any split gives the same bits)
        pool_.parallel_for(used, used < 64 ? int64_t(1) << 40 : 1, [&](int64_t b, int64_t end, int) {
            for (int64_t s = b; s < end; ++s) {
                const int64_t pair = moe_pairs_[size_t(s)];
                const int32_t e = a.ids.ptr<int32_t>()[(pair / k) * a.ids.stride[0] + pair % k];
                float* h = moe_h_.data() + pair * I;
                cpu::fp8_quant_dequant_row(h, a.experts[e].w1.out_dim, h);
                if (!amx_down && bf16_dots(a.experts[e].w2))
                    cpu::native_fp4_prepare_x(h, a.experts[e].w1.out_dim, moe_hbf_.data() + pair * I);
            }
        });

    make_tasks(true);
    if (amx_down) prepare_amx(true);
    pool_.parallel_for(int64_t(moe_tasks_.size()), grain, [&](int64_t b, int64_t end, int worker) {
        CpuScratch& s = scratch_[size_t(worker)];
        for (int64_t ti = b; ti < end; ++ti) {
            const MoeTask& task = moe_tasks_[size_t(ti)];
            const ExpertWeights& ew = a.experts[task.expert];
            const int64_t p0 = moe_offsets_[size_t(task.expert)],
                          np = moe_offsets_[size_t(task.expert + 1)] - p0;
            if (amx_down) {
                const int64_t nr = task.o1 - task.o0;
                s.rows.resize(size_t(np * nr));
                cpu::amx_rows(ew.w2, task.o0, task.o1, moe_xv_.data() + planes * p0 * I,
                              moe_xr_[size_t(task.expert)], moe_hrows_.data() + p0, np, s.rows.data(), nr, s);
                for (int64_t q = 0; q < np; ++q)
                    std::copy_n(s.rows.data() + q * nr, nr, dout + moe_pairs_[size_t(p0 + q)] * D + task.o0);
                continue;
            }
            if (s.acc.size() < size_t(np * cpu::kTileRows)) s.acc.resize(size_t(np * cpu::kTileRows));
            for (int64_t o0 = task.o0; o0 < task.o1; o0 += cpu::kTileRows) {
                const int64_t nw = std::min<int64_t>(cpu::kTileRows, task.o1 - o0);
                if (bf16_dots(ew.w2))
                    cpu::native_fp4_tile(ew.w2, o0, nw, moe_hbf_rows_.data() + p0, np, s.acc.data());
                else
                    cpu::weight_tile(ew.w2, o0, nw, moe_hrows_.data() + p0, np, s, s.acc.data());
                for (int64_t q = 0; q < np; ++q) {
                    float* d = dout + moe_pairs_[size_t(p0 + q)] * D + o0;
                    for (int64_t c = 0; c < nw; ++c) d[c] = s.acc[size_t(q * cpu::kTileRows + c)];
                }
            }
        }
    });

    if (a.pass == MoeArgs::Pass::kWhole) combine(a, moe_d_.data());
}

// Phase 3: out[t] = sum over slots in slot order (float) of weights[t, j] * d[t, j]; rows are independent.
void CpuBackend::combine(const MoeArgs& a, const float* d_rows) {
    const int64_t n = a.x.shape[0], D = a.x.shape[1], k = a.ids.shape[1];
    for (int64_t t = 0; t < n; ++t) {
        float* out = a.out.ptr<float>() + t * a.out.stride[0];
        const float* w = a.weights.ptr<float>() + t * a.weights.stride[0];
        for (int64_t c = 0; c < D; ++c) out[c] = 0.0f;
        for (int64_t j = 0; j < k; ++j) {
            const float* d = d_rows + (t * k + j) * D;
#pragma omp simd
            for (int64_t c = 0; c < D; ++c) out[c] += d[c] * w[j];
        }
    }
}

}  // namespace di::ops
