// Reference attention with window ring, compressed entries and sinks; and the window ring update.
#include <cmath>
#include <limits>
#include <vector>

#include "ops/ref/ref_backend_impl.h"

namespace di::ops {

void RefBackend::attention(const AttentionArgs& a) {
    check(a);
    const int64_t L = a.q.shape[0], H = a.q.shape[1], hd = a.q.shape[2];
    const int64_t ring_len = a.window - 1;
    for (int64_t t = 0; t < L; ++t) {
        const int64_t p = a.pos0 + t;
        // Visible keys: window (cached ring, then chunk rows), then compressed entries.
        std::vector<const float*> keys;
        for (int64_t pp = a.pos0 - a.n_cached; pp < a.pos0; ++pp)
            if (pp > p - a.window) keys.push_back(row_f32(a.ring, pp % ring_len));
        for (int64_t j = 0; j <= t; ++j)
            if (a.pos0 + j > p - a.window) keys.push_back(row_f32(a.kv, j));
        if (a.comp_mask == CompMask::kCausal) {
            for (int64_t w = 0; w < a.comp.shape[0] && w < (p + 1) / a.rate; ++w)
                keys.push_back(row_f32(a.comp, w));
        } else if (a.comp_mask == CompMask::kPicks) {
            std::vector<bool> seen(size_t(a.comp.shape[0]), false);
            for (int64_t j = 0; j < a.picks.shape[1]; ++j) {
                const int32_t w = a.picks.ptr<int32_t>()[t * a.picks.stride[0] + j];
                if (w < 0) continue;
                DI_CHECK(w < a.comp.shape[0], "pick {} of {} entries", w, a.comp.shape[0]);
                if (!seen[size_t(w)]) keys.push_back(row_f32(a.comp, w));
                seen[size_t(w)] = true;
            }
        }
        std::vector<double> z(keys.size());
        for (int64_t h = 0; h < H; ++h) {
            const float* q = a.q.at<float>(t, h);
            const double sink = a.sinks.ptr<float>()[h];
            double m = sink;
            for (size_t j = 0; j < keys.size(); ++j) {
                double dot = 0;
                for (int64_t c = 0; c < hd; ++c) dot += double(q[c]) * keys[j][c];
                z[j] = dot * a.scale;
                m = std::max(m, z[j]);
            }
            double denom = std::exp(sink - m);
            for (double& v : z) denom += (v = std::exp(v - m));
            float* o = a.out.at<float>(t, h);
            for (int64_t c = 0; c < hd; ++c) {
                double acc = 0;
                for (size_t j = 0; j < keys.size(); ++j) acc += z[j] * keys[j][c];
                o[c] = float(acc / denom);
            }
        }
    }
}

void RefBackend::window_store(const WindowStoreArgs& a) {
    check(a);
    const int64_t L = a.kv.shape[0], ring_len = a.ring.shape[0], hd = a.kv.shape[1];
    for (int64_t t = std::max<int64_t>(0, L - ring_len); t < L; ++t) {
        const float* src = row_f32(a.kv, t);
        float* dst = row_f32(a.ring, (a.pos0 + t) % ring_len);
        for (int64_t c = 0; c < hd; ++c) dst[c] = src[c];
    }
}

}  // namespace di::ops
