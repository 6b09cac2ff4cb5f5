#include "ops/compare/op_flops.h"

#include <algorithm>
#include <vector>

namespace di::ops {

double linear_flops(const LinearArgs& a) {
    return 2.0 * double(a.x.shape[0]) * double(a.w.out_dim) * double(a.w.in_dim);
}

double moe_flops(const MoeArgs& a, std::span<const int32_t> ids) {
    if (a.pass == MoeArgs::Pass::kCombine) return 0;
    const double D = double(a.x.shape[1]);
    double flops = 0;
    for (const int32_t e : ids)
        if (e >= 0 && e < a.n_experts && a.owns(e) && !a.experts[e].w1.empty()) {
            const double I = double(a.experts[e].w1.out_dim);
            flops += 2.0 * 2.0 * I * D + 2.0 * D * I;
        }
    return flops;
}

double attention_flops(const AttentionArgs& a, std::span<const int32_t> picks) {
    const int64_t L = a.q.shape[0], H = a.q.shape[1], hd = a.q.shape[2];
    const int64_t T = a.comp_mask == CompMask::kNone ? 0 : a.comp.shape[0];
    const int64_t k = a.comp_mask == CompMask::kPicks ? a.picks.shape[1] : 0;
    const int64_t first = a.pos0 - a.n_cached;  // the earliest position the ring holds
    double keys = 0;
    std::vector<int32_t> row;
    for (int64_t t = 0; t < L; ++t) {
        const int64_t p = a.pos0 + t;
        keys += double(p - std::max(first, p - a.window + 1) + 1);  // window positions (p - window, p]
        if (a.comp_mask == CompMask::kCausal) {
            keys += double(std::min(T, (p + 1) / a.rate));
        } else if (a.comp_mask == CompMask::kPicks && size_t((t + 1) * k) <= picks.size()) {
            row.assign(picks.begin() + t * k, picks.begin() + (t + 1) * k);
            std::erase_if(row, [T](int32_t w) { return w < 0 || w >= T; });
            std::sort(row.begin(), row.end());
            keys += double(std::unique(row.begin(), row.end()) - row.begin());
        }
    }
    return 4.0 * double(H) * double(hd) * keys;
}

double indexer_flops(const IndexerTopkArgs& a) {
    const int64_t L = a.q.shape[0], IH = a.q.shape[1], dim = a.q.shape[2], T = a.keys.shape[0];
    double entries = 0;
    for (int64_t t = 0; t < L; ++t) entries += double(std::min(T, (a.pos0 + t + 1) / a.rate));
    return 2.0 * double(IH) * double(dim) * entries;
}

double mhc_pre_flops(const MhcPreArgs& a) {
    return 2.0 * double(a.streams.shape[0]) * double(a.fn.shape[0]) * double(a.fn.shape[1]);
}

double hc_head_flops(const HcHeadArgs& a) {
    return 2.0 * double(a.streams.shape[0]) * double(a.fn.shape[0]) * double(a.fn.shape[1]);
}

}  // namespace di::ops
