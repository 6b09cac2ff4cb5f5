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
    // Work items are (query, group of up to kMaxSumHeads heads): the heads share the query's key list (one KV
    // head), so each key is read once for the group, in the dot tiles and the weighted sum; every (query,
    // head) keeps the arithmetic of one head alone (dot_tile and weighted_rows_sum give each row's bits
    // whatever the group).
    constexpr int G = cpu::kMaxSumHeads;
    const int64_t groups = (H + G - 1) / G, items = L * groups;
    const int64_t macs = 2 * int64_t(att_keys_.size()) * H * hd;
    const int64_t grain =
        macs < cpu::kMinParallelMacs ? items : std::max<int64_t>(1, items / (8 * pool_.size()));
    pool_.parallel_for(items, grain, [&](int64_t b, int64_t e, int worker) {
        CpuScratch& s = scratch_[size_t(worker)];
        for (int64_t i = b; i < e; ++i) {
            const int64_t t = i / groups, h0 = i % groups * G;
            const int nh = int(std::min<int64_t>(G, H - h0));
            const float* const* keys = att_keys_.data() + att_off_[size_t(t)];
            const int64_t nk = att_off_[size_t(t + 1)] - att_off_[size_t(t)];
            const int64_t nk4 = (nk + cpu::kTileRows - 1) / cpu::kTileRows * cpu::kTileRows;
            if (s.acc.size() < size_t(G * nk4)) s.acc.resize(size_t(G * nk4));
            float* z = s.acc.data();  // head r's scores at z + r * nk4
            const float* q[G];
            for (int r = 0; r < nh; ++r) q[r] = a.q.at<float>(t, h0 + r);
            for (int64_t j = 0; j < nk; j += cpu::kTileRows) {
                const float* tile[cpu::kTileRows];
                float res[G * cpu::kTileRows];
                for (int64_t k = 0; k < cpu::kTileRows; ++k) tile[k] = keys[std::min(j + k, nk - 1)];
                cpu::dot_tile(q, nh, tile, hd, res);
                for (int r = 0; r < nh; ++r)
                    for (int64_t k = 0; k < cpu::kTileRows; ++k)
                        z[r * nk4 + j + k] = res[r * cpu::kTileRows + k];
            }
            float denom[G];
            for (int r = 0; r < nh; ++r) {
                float* zr = z + r * nk4;
                const float sink = a.sinks.ptr<float>()[h0 + r];
                float m = sink;
                for (int64_t j = 0; j < nk; ++j) m = std::max(m, zr[j] *= a.scale);
                denom[r] = std::exp(sink - m);
                // Weights below FLT_MIN are flushed (subnormal multipliers cost a microcode assist per
                // vector); that moves out by < 2^-126 max|k| per key, far inside the float rounding of the
                // sum.
                for (int64_t j = 0; j < nk; ++j) {
                    const float p = std::exp(zr[j] - m);
                    denom[r] += (zr[j] = p < FLT_MIN ? 0.0f : p);
                }
            }
            float* o = a.out.at<float>(t, h0);
            cpu::weighted_rows_sum(keys, z, nk4, nh, nk, hd, o, a.out.stride[1]);
            for (int r = 0; r < nh; ++r)
                for (int64_t c = 0; c < hd; ++c) o[r * a.out.stride[1] + c] /= denom[r];
        }
    });
}

}  // namespace di::ops
