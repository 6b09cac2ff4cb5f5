#include "cuda_attention_bench.h"

#include <algorithm>
#include <numeric>
#include <tuple>
#include <utility>

#include "ops/cuda/cuda_check.h"

namespace di::bench {
namespace {

using namespace di::cuda;

// V4-Flash's attention (64 heads x 512, window 128) for L queries over T compressed entries: random device
// buffers (ring, chunk rows, entries, sinks, q) and the picks given, freed with it.
struct FlashAttention {
    static constexpr int64_t H = 64, hd = 512, window = 128, k = 512;
    float *q = nullptr, *ring = nullptr, *kv = nullptr, *comp = nullptr, *sinks = nullptr, *out = nullptr;
    int32_t* picks = nullptr;

    FlashAttention(int64_t L, int64_t T, const std::vector<int32_t>& host_picks) {
        q = static_cast<float*>(random_device(size_t(L * H * hd) * 4, 2));
        ring = static_cast<float*>(random_device(size_t((window - 1) * hd) * 4, 2));
        kv = static_cast<float*>(random_device(size_t(L * hd) * 4, 2));
        comp = static_cast<float*>(random_device(size_t(std::max<int64_t>(T, 1) * hd) * 4, 2));
        sinks = static_cast<float*>(random_device(size_t(H) * 4, 2));
        DI_CUDA_CHECK(cudaMalloc(&out, size_t(L * H * hd) * 4));
        DI_CUDA_CHECK(cudaMalloc(&picks, host_picks.size() * 4));
        DI_CUDA_CHECK(cudaMemcpy(picks, host_picks.data(), host_picks.size() * 4, cudaMemcpyHostToDevice));
    }
    ~FlashAttention() {
        cudaFree(q), cudaFree(ring), cudaFree(kv), cudaFree(comp), cudaFree(sinks), cudaFree(out),
            cudaFree(picks);
    }
    // A chunk of L queries at pos0 behind n_cached ring rows.
    AttentionParams params(int64_t L, int64_t T, AttnCompMask mask, int64_t rate, int64_t pos0,
                           int64_t n_cached, bool f16) const {
        const bool picked = mask == AttnCompMask::kPicks;
        return {.q = q,
                .q_s0 = H * hd,
                .q_s1 = hd,
                .ring = n_cached > 0 ? ring : nullptr,
                .ld_ring = hd,
                .kv = kv,
                .ld_kv = hd,
                .comp = mask == AttnCompMask::kNone ? nullptr : comp,
                .ld_comp = hd,
                .n_comp = T,
                .picks = picked ? picks : nullptr,
                .ld_picks = k,
                .k = picked ? k : 0,
                .sinks = sinks,
                .out = out,
                .o_s0 = H * hd,
                .o_s1 = hd,
                .L = L,
                .H = H,
                .hd = hd,
                .pos0 = pos0,
                .n_cached = n_cached,
                .window = window,
                .comp_mask = mask,
                .rate = rate,
                .scale = 0.044f,
                .f16 = f16};
    }
};

}  // namespace

void bench_attention(std::vector<Row>& rows, cudaStream_t s, const char* name, AttnCompMask mask,
                     int64_t entries) {
    using A = FlashAttention;
    std::vector<int32_t> hp(size_t(A::k));
    for (auto& v : hp) v = int32_t(g_rng() % uint64_t(entries));
    const A a(1, entries, hp);
    const AttentionParams p =
        a.params(1, entries, mask, 128, mask == AttnCompMask::kCausal ? entries * 128 : entries * 4,
                 A::window - 1, false);
    const double keys = double(A::window + (mask == AttnCompMask::kPicks ? A::k : entries));
    BenchScratch scratch;
    for (auto [vname, v] : {std::pair{"split_kv", AttentionVariant::kSplitKv},
                            std::pair{"per_query", AttentionVariant::kPerQuery}}) {
        launch_attention(p, scratch, s, v);  // scratch sized before the capture
        const double us = graph_us(s, 20, [&](int) { launch_attention(p, scratch, s, v); });
        DI_CUDA_CHECK(cudaGetLastError());
        rows.push_back({name, vname, us, keys * A::hd * 4 + 2.0 * A::H * A::hd * 4});
    }
}

void bench_attention_prefill(std::vector<GemmRow>& rows, cudaStream_t s, const char* name, AttnCompMask mask,
                             int64_t L) {
    using A = FlashAttention;
    const int64_t rate = mask == AttnCompMask::kPicks ? 4 : 128,
                  T = mask == AttnCompMask::kNone ? 0 : L / rate;
    std::vector<int32_t> hp(size_t(L * A::k), -1);
    double keys = 0;  // summed over the queries
    std::vector<int32_t> all(size_t(std::max<int64_t>(T, 1)));
    for (int64_t t = 0; t < L; ++t) {
        const int64_t visible = std::min(T, (t + 1) / rate);
        int64_t n_comp = mask == AttnCompMask::kNone ? 0 : visible;
        if (mask == AttnCompMask::kPicks) {  // distinct picks: the first min(k, visible) of a shuffle
            std::iota(all.begin(), all.begin() + visible, 0);
            n_comp = std::min(A::k, visible);
            for (int64_t i = 0; i < n_comp; ++i) {
                std::swap(all[size_t(i)], all[size_t(i + int64_t(g_rng() % uint64_t(visible - i)))]);
                hp[size_t(t * A::k + i)] = all[size_t(i)];
            }
        }
        keys += double(std::min(t + 1, A::window) + n_comp);
    }
    const A a(L, T, hp);
    const AttentionParams p = a.params(L, T, mask, rate, 0, 0, true);
    BenchScratch scratch;
    for (auto [vname, v, wgmma] : {std::tuple{"mma64", AttentionVariant::kMma64, 0},
                                   std::tuple{"mma64 wgmma", AttentionVariant::kMma64, 1},
                                   std::tuple{"mma64 wgmma2", AttentionVariant::kMma64, 2},
                                   std::tuple{"mma", AttentionVariant::kMma, 0}}) {
        if (v == AttentionVariant::kMma64 ? !attention_mma64_supported(p) : !attention_mma_supported(p))
            continue;
        const int was = set_attention_wgmma(wgmma);
        launch_attention(p, scratch, s, v);  // scratch sized (and shared memory raised) before the capture
        const double us = graph_us(s, 5, [&](int) { launch_attention(p, scratch, s, v); });
        set_attention_wgmma(was);
        DI_CUDA_CHECK(cudaGetLastError());
        rows.push_back({name, vname, us, 4.0 * A::H * A::hd * keys});
    }
}

}  // namespace di::bench
