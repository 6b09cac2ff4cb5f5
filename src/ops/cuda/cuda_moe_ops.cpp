// CudaBackend's routed experts (moe, expert parallelism's combine pass) and their device-side expert table:
// check(args) first, then the device check, then the launch with plain params.
#include "ops/cuda/cuda_backend_impl.h"
#include "ops/cuda/fp8_gemm.h"
#include "ops/cuda/tensor_map.h"

namespace di::ops::cuda_impl {
namespace {

// Dispatch preference order, the fallback last (the names in CudaBackend's constructor, cuda_ops.cpp).
constexpr cuda::MoeVariant kMoeEnum[] = {cuda::MoeVariant::kW4a8,      cuda::MoeVariant::kWgmma,
                                         cuda::MoeVariant::kGemm,      cuda::MoeVariant::kMma,
                                         cuda::MoeVariant::kSplitRows, cuda::MoeVariant::kGrouped,
                                         cuda::MoeVariant::kPerPair};

// Whether an expert's weights are on this device (expert parallelism places a block of them per rank).
bool placed(const ExpertWeights& w) { return w.w1.data.data != nullptr; }

}  // namespace

// The TMA maps of an fp4 table's matrices (boxes of 64 bytes x 32 rows: moe_w4a8_bulk_ss's converting warps),
// or none (t.maps null) where any matrix is not fp4 or its layout has no map.
void CudaBackend::expert_maps(ExpertTable& t) {
    struct alignas(64) Map {
        unsigned char bytes[cuda::kTensorMapBytes];
    };
    std::vector<Map> maps(t.host.size());
    bool ok = true;
    for (size_t i = 0; ok && i < t.host.size(); ++i) {
        const WeightRef& w = t.host[i];
        ok = w.format == uint8_t(WeightFormat::kFp4Group) &&
             cuda::encode_byte_rows_map(&maps[i], w.data, w.out_dim, w.in_dim / 2, w.ld, 64, 32);
    }
    alloc_.deallocate(t.maps);
    t.maps = nullptr;
    if (!ok) return;
    const size_t bytes = maps.size() * sizeof(Map);
    t.maps = alloc_.allocate(bytes);
    DI_CUDA_CHECK(cudaMemcpyAsync(t.maps, maps.data(), bytes, cudaMemcpyHostToDevice, stream()));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

// The experts' WeightRefs live in device memory; rebuilt (one host->device copy) only when they change. The
// scale checks (mma_ok, e4m3_ok, e4m3_rows) read the scales once: weights at the same addresses are taken to
// hold the same values (a model's weights do not change while it is loaded).
// Experts not placed on this device (expert parallelism: another rank holds them) take the first placed
// expert's entry, which no kernel reads for them (MoeParams::owned_first/end) and which keeps the table's
// format and mma checks those of the experts that are here.
const CudaBackend::ExpertTable& CudaBackend::expert_table(const MoeArgs& a) {
    if (auto it = expert_tables_.find(a.experts);
        it != expert_tables_.end() && it->second.host.size() == size_t(3 * a.n_experts)) {
        // The same pointers, strides, shapes and formats mean the same table: comparing them is a few
        // compares per matrix, rebuilding is 3 * E weight_refs and a host->device copy per MoE call.
        auto same_as = [](const WeightRef& r, const QWeight& q) {
            if (q.data.data == nullptr) return true;  // not placed here: its placeholder entry
            return r.data == q.data.data && r.scale == q.scale.data && r.ld == q.data.stride[0] &&
                   r.out_dim == q.out_dim && r.in_dim == q.in_dim && r.format == uint8_t(q.format) &&
                   (q.scale.empty() || r.ld_scale == q.scale.stride[0]) &&
                   (q.format != WeightFormat::kDense || r.dense_dt == fdt(q.data.dtype, "moe.w")) &&
                   (q.scale.empty() || r.scale_e8m0 == (q.scale.dtype == DType::kE8M0));
        };
        bool same = true;
        for (int64_t e = 0; same && e < a.n_experts; ++e) {
            const ExpertWeights& w = a.experts[e];
            const WeightRef* r = &it->second.host[size_t(3 * e)];
            same = same_as(r[0], w.w1) && same_as(r[1], w.w3) && same_as(r[2], w.w2);
        }
        if (same) return it->second;
    }
    std::vector<WeightRef> host(size_t(3 * a.n_experts));
    int64_t first_placed = -1;
    for (int64_t e = 0; e < a.n_experts; ++e) {
        if (!placed(a.experts[e])) continue;
        if (first_placed < 0) first_placed = e;
        host[size_t(3 * e)] = weight_ref(a.experts[e].w1, "moe.w1");
        host[size_t(3 * e + 1)] = weight_ref(a.experts[e].w3, "moe.w3");
        host[size_t(3 * e + 2)] = weight_ref(a.experts[e].w2, "moe.w2");
    }
    DI_CHECK(first_placed >= 0, "moe: none of the {} experts is on this device", a.n_experts);
    for (int64_t e = 0; e < a.n_experts; ++e)
        if (!placed(a.experts[e]))
            for (int m = 0; m < 3; ++m) host[size_t(3 * e + m)] = host[size_t(3 * first_placed + m)];
    ExpertTable& t = expert_tables_[a.experts];
    const size_t bytes = host.size() * sizeof(WeightRef);
    bool same = t.host.size() == host.size();
    for (size_t i = 0; same && i < host.size(); ++i) {
        const WeightRef &x = t.host[i], &y = host[i];
        same = x.data == y.data && x.scale == y.scale && x.ld == y.ld && x.ld_scale == y.ld_scale &&
               x.out_dim == y.out_dim && x.in_dim == y.in_dim && x.format == y.format &&
               x.dense_dt == y.dense_dt && x.scale_e8m0 == y.scale_e8m0;
    }
    if (!same) {
        if (t.device == nullptr || t.host.size() != host.size()) {
            alloc_.deallocate(t.device);
            t.device = alloc_.allocate(bytes);
        }
        before_host_sync();
        DI_CUDA_CHECK(cudaMemcpyAsync(t.device, host.data(), bytes, cudaMemcpyHostToDevice, stream()));
        DI_CUDA_CHECK(cudaStreamSynchronize(stream()));
        t.host = std::move(host);
        t.gemv_format = cuda::gemv_format(t.host[0]);
        for (const WeightRef& w : t.host)
            if (cuda::gemv_format(w) != t.gemv_format) t.gemv_format = -1;
        bool w13_alike = true;  // moe_mma walks an expert's W1 and W3 rows with one stride
        for (size_t e = 0; e + 2 < t.host.size(); e += 3)
            w13_alike &= t.host[e].ld == t.host[e + 1].ld && t.host[e].ld_scale == t.host[e + 1].ld_scale;
        t.scales_4b = cuda::scale_rows_aligned(t.host.data(), int64_t(t.host.size()), 4);
        t.scales_16b = cuda::scale_rows_aligned(t.host.data(), int64_t(t.host.size()), 16);
        t.mma_ok = w13_alike && cuda::fp4_scales_fold_to_f16(static_cast<const WeightRef*>(t.device),
                                                             t.host.data(), int64_t(t.host.size()), stream());
        const cuda::E4m3Fold fold = cuda::fp4_scales_fold_to_e4m3(
            static_cast<const WeightRef*>(t.device), t.host.data(), int64_t(t.host.size()), stream());
        t.e4m3_ok = w13_alike && fold.chunks, t.e4m3_rows = t.e4m3_ok && fold.rows;
        expert_maps(t);
    }
    return t;
}

void CudaBackend::moe(const MoeArgs& a) {
    if (replaying()) return;
    check(a);
    device_args(a, "moe");
    const int64_t n = a.x.shape[0], k = a.ids.shape[1], D = a.x.shape[1];
    if (a.pass == MoeArgs::Pass::kCombine) return moe_combine_pass(a);
    const ExpertWeights* any = a.experts;  // a placed expert
    while (any + 1 < a.experts + a.n_experts && !placed(*any)) ++any;
    const int64_t I = any->w1.out_dim;
    for (int64_t e = 0; e < a.n_experts; ++e) {
        const ExpertWeights& w = a.experts[e];
        if (!placed(w)) continue;  // held by another rank
        DI_CHECK(w.w1.out_dim == I && w.w3.out_dim == I && w.w1.in_dim == D && w.w3.in_dim == D &&
                     w.w2.out_dim == D && w.w2.in_dim == I,
                 "moe: expert {} shapes w1 [{}, {}] w3 [{}, {}] w2 [{}, {}] for hidden {} moe_dim {}", e,
                 w.w1.out_dim, w.w1.in_dim, w.w3.out_dim, w.w3.in_dim, w.w2.out_dim, w.w2.in_dim, D, I);
    }
    const ExpertTable& table = expert_table(a);
    // Tokens in chunks of at most kMoeGroupedMaxPairs (token, slot) pairs, the most the grouped kernels plan
    // for: a prefill reads each selected expert once per chunk instead of falling back to one weight pass per
    // pair; of up to kMoeGemmMaxPairs where gemm takes them. Every variant computes a token's row from its
    // own pairs alone, so chunking changes no bits of a variant.
    const bool experts_pass = a.pass == MoeArgs::Pass::kExperts;
    auto takes = [&](const cuda::MoeParams& p, int i, bool forced) {
        switch (kMoeEnum[i]) {
            case cuda::MoeVariant::kW4a8:
                return cuda::moe_w4a8_supported(p, forced);
            case cuda::MoeVariant::kWgmma:
                return cuda::moe_wgmma_supported(p, forced);
            case cuda::MoeVariant::kGemm:
                return cuda::moe_gemm_supported(p, forced);
            case cuda::MoeVariant::kMma:
                return cuda::moe_mma_supported(p);
            case cuda::MoeVariant::kSplitRows:
                return cuda::moe_split_supported(p);
            case cuda::MoeVariant::kGrouped:
                return cuda::moe_grouped_supported(p);
            default:
                return true;
        }
    };
    int64_t chunk = std::max<int64_t>(1, cuda::kMoeGroupedMaxPairs / k);
    if (n > chunk) {
        cuda::MoeParams probe{};
        probe.n = std::min(n, cuda::kMoeGemmMaxPairs / k), probe.k = k, probe.D = D, probe.I = I;
        probe.gemv_format = table.gemv_format, probe.mma_ok = table.mma_ok, probe.scales_4b = table.scales_4b;
        probe.e4m3_ok = table.e4m3_ok, probe.act_fp8 = a.act == ActQuant::kFp8Block128;
        auto probe_takes = [&](int i, bool forced) { return takes(probe, i, forced); };
        if (moe_v_.pick(probe_takes) <= 2) {  // w4a8, wgmma, gemm
            chunk = probe.n;
        } else if (cuda::moe_mma_max_pairs() > cuda::kMoeGroupedMaxPairs) {  // mma over more pairs at once
            probe.n = std::min(n, cuda::moe_mma_max_pairs() / k);
            const int pv = moe_v_.pick(probe_takes);
            if (kMoeEnum[pv] == cuda::MoeVariant::kMma && probe_takes(pv, true)) chunk = probe.n;
        }
    }
    if (experts_pass)  // the pairs of other ranks' experts stay zero
        DI_CUDA_CHECK(cudaMemsetAsync(a.slots.data, 0, size_t(a.slots.nbytes()), stream()));
    for (int64_t t0 = 0; t0 < n; t0 += chunk) {
        const int64_t m = std::min(chunk, n - t0);
        cuda::MoeParams p{.x = f32(a.x) + t0 * ld(a.x),
                          .ld_x = ld(a.x),
                          .ids = a.ids.ptr<int32_t>() + t0 * ld(a.ids),
                          .ld_ids = ld(a.ids),
                          .w = f32(a.weights) + t0 * ld(a.weights),
                          .ld_w = ld(a.weights),
                          .table = static_cast<const WeightRef*>(table.device),
                          .n_experts = a.n_experts,
                          .out = f32m(a.out) + t0 * ld(a.out),
                          .ld_out = ld(a.out),
                          .n = m,
                          .k = k,
                          .D = D,
                          .I = I,
                          .limit = a.limit,
                          .gemv_format = table.gemv_format,
                          .mma_ok = table.mma_ok,
                          .scales_4b = table.scales_4b,
                          .scales_16b = table.scales_16b,
                          .e4m3_ok = table.e4m3_ok,
                          .e4m3_rows = table.e4m3_rows,
                          .maps = table.maps};
        if (experts_pass)
            p.owned_first = a.expert_first, p.owned_end = a.expert_end,
            p.y_out = a.slots.ptr<float>() + t0 * k * D;
        const cuda::MoeParams unquantised = p;
        float* xq = nullptr;
        if (a.act == ActQuant::kFp8Block128) {  // the chunk's rows quantised once for every variant
            xq = static_cast<float*>(scratch_.get(6, size_t(m * D) * sizeof(float)));
            p.x = xq, p.ld_x = D, p.act_fp8 = true;
        }
        const int v = moe_v_.choose(
            [&](int i, bool forced) { return takes(p, i, forced); },
            [&] { return fmt::format("{} pairs, expert format {}", m * k, table.gemv_format); });
        if (p.act_fp8) {
            cuda::MoeParams direct = unquantised;
            direct.act_fp8 = true;
            // w4a8 quantises x itself, so it takes x as it is: quantising the dequantised copy again gives
            // the same values (e4m3 times scale; at most the scale halved and the bytes doubled); mma at one
            // token quantises x where it makes its chunks (the copy's bits)
            if (kMoeEnum[v] == cuda::MoeVariant::kW4a8 && cuda::moe_w4a8_supported(direct, true))
                p.x = direct.x, p.ld_x = direct.ld_x;
            else if (kMoeEnum[v] == cuda::MoeVariant::kMma && m == 1 && cuda::act_quant_in_kernels())
                p.x = direct.x, p.ld_x = direct.ld_x, p.x_raw = true;
            else
                cuda::launch_act_quant_dequant(unquantised.x, unquantised.ld_x, m, D, xq, stream_);
        }
        cuda::launch_moe(p, scratch_, stream_, kMoeEnum[v]);
        launched("moe");
    }
}

// Expert parallelism's second pass: out = the weighted sum of the gathered slots, the combine every variant
// ends with (so a token's bits equal the one-call op's).
void CudaBackend::moe_combine_pass(const MoeArgs& a) {
    const int64_t n = a.x.shape[0], k = a.ids.shape[1], D = a.x.shape[1];
    const cuda::MoeParams p{.x = f32(a.x),
                            .ld_x = ld(a.x),
                            .ids = a.ids.ptr<int32_t>(),
                            .ld_ids = ld(a.ids),
                            .w = f32(a.weights),
                            .ld_w = ld(a.weights),
                            .table = nullptr,
                            .n_experts = a.n_experts,
                            .out = f32m(a.out),
                            .ld_out = ld(a.out),
                            .n = n,
                            .k = k,
                            .D = D,
                            .I = 0,
                            .limit = a.limit};
    if (n > 0) cuda::launch_moe_combine(p, a.slots.ptr<float>(), stream_);
    launched("moe");
}

}  // namespace di::ops::cuda_impl
