// Attention on the CPU: per query the visible keys are listed once (same order as ref: cached ring, chunk
// rows, compressed entries), then (query, head) pairs run in parallel: float scores via the 16-lane dot
// kernel, softmax with the sink in float, and the weighted key sum in key order.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/cpu_kernels.h"

namespace di::ops {

void CpuBackend::collect_keys(const AttentionArgs& a) {
    const int64_t L = a.q.shape[0], ring_len = a.window - 1;
    att_off_.assign(size_t(L + 1), 0);
    att_keys_.clear();
    for (int64_t t = 0; t < L; ++t) {
        const int64_t p = a.pos0 + t;
        for (int64_t pp = std::max(a.pos0 - a.n_cached, p - a.window + 1); pp < a.pos0; ++pp)
            att_keys_.push_back(a.ring.ptr<float>() + (pp % ring_len) * a.ring.stride[0]);
        for (int64_t j = std::max<int64_t>(0, p - a.window + 1 - a.pos0); j <= t; ++j)
            att_keys_.push_back(a.kv.ptr<float>() + j * a.kv.stride[0]);
        if (a.comp_mask == CompMask::kCausal) {
            for (int64_t w = 0; w < a.comp.shape[0] && w < (p + 1) / a.rate; ++w)
                att_keys_.push_back(a.comp.ptr<float>() + w * a.comp.stride[0]);
        } else if (a.comp_mask == CompMask::kPicks) {
            att_seen_.assign(size_t(a.comp.shape[0]), 0);
            for (int64_t j = 0; j < a.picks.shape[1]; ++j) {
                const int32_t w = a.picks.ptr<int32_t>()[t * a.picks.stride[0] + j];
                if (w < 0) continue;
                DI_CHECK(w < a.comp.shape[0], "pick {} of {} entries", w, a.comp.shape[0]);
                if (!att_seen_[size_t(w)]) att_keys_.push_back(a.comp.ptr<float>() + w * a.comp.stride[0]);
                att_seen_[size_t(w)] = 1;
            }
        }
        att_off_[size_t(t + 1)] = int64_t(att_keys_.size());
    }
}

void CpuBackend::attention(const AttentionArgs& a) {
    if (!take_fast(cpu_fast_index("attention"))) return ref_->attention(a);
    check(a);
    const int64_t L = a.q.shape[0], H = a.q.shape[1], hd = a.q.shape[2];
    if (L == 0) return;
    collect_keys(a);
    const int64_t macs = 2 * int64_t(att_keys_.size()) * H * hd;
    const int64_t grain =
        macs < cpu::kMinParallelMacs ? L * H : std::max<int64_t>(1, L * H / (8 * pool_.size()));
    pool_.parallel_for(L * H, grain, [&](int64_t b, int64_t e, int worker) {
        CpuScratch& s = scratch_[size_t(worker)];
        for (int64_t i = b; i < e; ++i) {
            const int64_t t = i / H, h = i % H;
            const float* const* keys = att_keys_.data() + att_off_[size_t(t)];
            const int64_t nk = att_off_[size_t(t + 1)] - att_off_[size_t(t)];
            const int64_t nk4 = (nk + cpu::kTileRows - 1) / cpu::kTileRows * cpu::kTileRows;
            if (s.acc.size() < size_t(nk4)) s.acc.resize(size_t(nk4));
            float* z = s.acc.data();
            const float* q = a.q.at<float>(t, h);
            for (int64_t j = 0; j < nk; j += cpu::kTileRows) {
                const float* tile[cpu::kTileRows];
                for (int64_t k = 0; k < cpu::kTileRows; ++k) tile[k] = keys[std::min(j + k, nk - 1)];
                cpu::dot_tile(&q, 1, tile, hd, z + j);
            }
            const float sink = a.sinks.ptr<float>()[h];
            float m = sink;
            for (int64_t j = 0; j < nk; ++j) m = std::max(m, z[j] *= a.scale);
            float denom = std::exp(sink - m);
            // Weights below FLT_MIN are flushed (subnormal multipliers cost a microcode assist per vector);
            // that moves out by < 2^-126 max|k| per key, far inside the float rounding of the sum.
            for (int64_t j = 0; j < nk; ++j) {
                const float p = std::exp(z[j] - m);
                denom += (z[j] = p < FLT_MIN ? 0.0f : p);
            }
            float* o = a.out.at<float>(t, h);
            cpu::weighted_row_sum(keys, z, nk, hd, o);
            for (int64_t c = 0; c < hd; ++c) o[c] /= denom;
        }
    });
}

}  // namespace di::ops
