// Lightning indexer on the CPU with picks identical to ref. Scores are computed in float (16-lane dots, all
// heads of a query against 4 keys per tile) together with a rigorous bound E on |float - ref's double|.
// Entries are ordered by float score; wherever two neighbours are within 2E of each other (so their order
// could differ from ref's), the whole run of such neighbours that reaches into the top k is rescored
// exactly as ref does (same double operations in the same order, hence the same doubles) and re-sorted
// with ref's rule (score descending, lower id first). Entries in different runs differ by more than
// e_a + e_b, so their float order is ref's order.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/cpu_kernels.h"

namespace di::ops {
namespace {

// ref's score of entry w for query t, operation for operation (ref_indexer.cpp).
double ref_score(const IndexerTopkArgs& a, int64_t t, int64_t w) {
    const int64_t H = a.q.shape[1], dim = a.q.shape[2];
    const float* key = a.keys.ptr<float>() + w * a.keys.stride[0];
    double s = 0;
    for (int64_t h = 0; h < H; ++h) {
        const float* q = a.q.at<float>(t, h);
        double dot = 0;
        for (int64_t c = 0; c < dim; ++c) dot += double(q[c]) * key[c];
        const double wt = double(a.weights.ptr<float>()[t * a.weights.stride[0] + h]) * a.weight_scale;
        s += std::max(dot, 0.0) * a.score_scale * wt;
    }
    return s;
}

double norm2(const float* v, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(v[i]) * v[i];
    return std::sqrt(s);
}

}  // namespace

void CpuBackend::indexer_topk(const IndexerTopkArgs& a) {
    if (!take_fast(cpu_fast_index("indexer_topk"))) return ref_->indexer_topk(a);
    check(a);
    const int64_t L = a.q.shape[0], H = a.q.shape[1], dim = a.q.shape[2], T = a.keys.shape[0];
    if (L == 0) return;
    double kmax = 0;  // largest key norm: the bound below uses |q . key| <= |q|_2 |key|_2
    for (int64_t w = 0; w < T; ++w)
        kmax = std::max(kmax, norm2(a.keys.ptr<float>() + w * a.keys.stride[0], dim));
    const int64_t grain = 2 * H * dim * T < cpu::kMinParallelMacs ? L : 1;
    pool_.parallel_for(L, grain, [&](int64_t t0, int64_t t1, int worker) {
        CpuScratch& s = scratch_[size_t(worker)];
        for (int64_t t = t0; t < t1; ++t) indexer_query(a, t, kmax, s);
    });
}

void CpuBackend::indexer_query(const IndexerTopkArgs& a, int64_t t, double kmax, CpuScratch& s) {
    const int64_t H = a.q.shape[1], dim = a.q.shape[2], T = a.keys.shape[0], k = a.picks.shape[1];
    const int64_t visible = std::min(T, (a.pos0 + t + 1) / a.rate);
    int32_t* out = a.picks.ptr<int32_t>() + t * a.picks.stride[0];
    const int64_t n_pick = std::min(k, visible);
    for (int64_t j = n_pick; j < k; ++j) out[j] = -1;  // ref: entries past the cutoff score -inf -> -1
    if (n_pick == 0) return;

    // Float scores. wt[h] = weight * weight_scale * score_scale as ref forms it (in double), rounded once.
    s.wt.resize(size_t(H));
    s.qrows.resize(size_t(H));
    double c_t = 0;  // sum_h |wt_h| |q_h|_2
    for (int64_t h = 0; h < H; ++h) {
        const double wt =
            double(a.weights.ptr<float>()[t * a.weights.stride[0] + h]) * a.weight_scale * a.score_scale;
        s.wt[size_t(h)] = float(wt);
        s.qrows[size_t(h)] = a.q.at<float>(t, h);
        c_t += std::fabs(wt) * norm2(s.qrows[size_t(h)], dim);
    }
    // |float - ref| <= kmax c_t (dot error (ceil(dim/16) + 6) u, relu 1-Lipschitz, 3 roundings per term,
    // H-term float sum) + ref's own double error; 10% headroom.
    const double u = 0x1p-24;
    const double E = 1.1 * kmax * c_t * ((double((dim + 15) / 16) + 6.0 + 3.0 + double(H)) * u + 1e-12);
    s.score.resize(size_t(visible));
    s.acc.resize(size_t(H * cpu::kTileRows) + size_t(cpu::kTileRows));
    for (int64_t w0 = 0; w0 < visible; w0 += cpu::kTileRows) {
        const float* tile[cpu::kTileRows];
        for (int64_t j = 0; j < cpu::kTileRows; ++j)
            tile[j] = a.keys.ptr<float>() + std::min(w0 + j, visible - 1) * a.keys.stride[0];
        cpu::dot_tile(s.qrows.data(), H, tile, dim, s.acc.data());
        for (int64_t j = 0; j < cpu::kTileRows && w0 + j < visible; ++j) {
            float sc = 0.0f;
            for (int64_t h = 0; h < H; ++h)
                sc += std::max(s.acc[size_t(h * cpu::kTileRows + j)], 0.0f) * s.wt[size_t(h)];
            s.score[size_t(w0 + j)] = sc;
        }
    }
    // Float order (score descending, lower id first), then exact re-sorting of uncertain runs.
    s.order.resize(size_t(visible));
    std::iota(s.order.begin(), s.order.end(), 0);
    auto by_float = [&](int32_t x, int32_t y) {
        return s.score[size_t(x)] != s.score[size_t(y)] ? s.score[size_t(x)] > s.score[size_t(y)] : x < y;
    };
    std::sort(s.order.begin(), s.order.end(), by_float);
    for (int64_t b = 0; b < n_pick;) {
        int64_t e = b + 1;
        while (e < visible &&
               double(s.score[size_t(s.order[size_t(e - 1)])]) - s.score[size_t(s.order[size_t(e)])] <= 2 * E)
            ++e;
        if (e - b > 1) {
            s.exact.resize(size_t(e - b));
            for (int64_t i = b; i < e; ++i)
                s.exact[size_t(i - b)] = {ref_score(a, t, s.order[size_t(i)]), s.order[size_t(i)]};
            std::sort(s.exact.begin(), s.exact.end(), [](const auto& x, const auto& y) {
                return x.first != y.first ? x.first > y.first : x.second < y.second;
            });
            for (int64_t i = b; i < e; ++i) s.order[size_t(i)] = s.exact[size_t(i - b)].second;
        }
        b = e;
    }
    for (int64_t j = 0; j < n_pick; ++j) out[j] = s.order[size_t(j)];
}

}  // namespace di::ops
