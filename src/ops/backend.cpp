// Backend's default cast, act_quant, argmax and top_candidates, for backends whose memory is the host's (a
// device backend implements its own).
#include "ops/backend.h"

#include <cstring>
#include <tuple>

namespace di::ops {

void Backend::prepare_queries(const QueryPrep& q_prep) {
    check(q_prep);
    const TensorView& q = q_prep.rope.x;
    const TensorView rows = q.reshape({q.shape[0] * q.shape[1], q.shape[2]});
    if (!q_prep.src.empty()) cast({.x = q_prep.src.reshape({rows.shape[0], rows.shape[1]}), .out = rows});
    const RmsNormArgs norm{.x = rows, .weight = {}, .y = rows, .eps = q_prep.eps};
    rms_norm_ropes({&norm, 1}, {&q_prep.rope, 1});
}

void Backend::cast(const CastArgs& a) {
    check(a);
    DI_CHECK(a.x.device == Device::kHost && a.out.device == Device::kHost,
             "cast: backend {} has device memory and no cast of its own", name());
    for (int64_t r = 0; r < a.x.shape[0]; ++r)
        for (int64_t c = 0; c < a.x.shape[1]; ++c)
            store_float(a.out.data, a.out.dtype, r * a.out.stride[0] + c,
                        load_float(a.x.data, a.x.dtype, r * a.x.stride[0] + c));
}

void Backend::act_quant(const ActQuantArgs& a) {
    DI_CHECK(a.x.device == Device::kHost && a.q.device == Device::kHost && a.scales.device == Device::kHost,
             "act_quant: backend {} has device memory and no act_quant of its own", name());
    fp8_block_quant(a);
}

void Backend::argmax(const ArgmaxArgs& a) {
    check(a);
    DI_CHECK(a.x.device == Device::kHost && a.ids.device == Device::kHost && a.bad.device == Device::kHost,
             "argmax: backend {} has device memory and no argmax of its own", name());
    for (int64_t r = 0; r < a.x.shape[0]; ++r)
        std::tie(a.ids.ptr<int32_t>()[r], a.bad.ptr<int32_t>()[r]) =
            argmax_row(a.x.at<float>(r), a.x.shape[1]);
}

void Backend::top_candidates(const TopCandidatesArgs& a) {
    check(a);
    for (const TensorView* v : {&a.x, &a.temperature, &a.ids, &a.values, &a.sums, &a.bad})
        DI_CHECK(v->device == Device::kHost,
                 "top_candidates: backend {} has device memory and no op of its own", name());
    const int64_t C = a.ids.shape[1];
    for (int64_t r = 0; r < a.x.shape[0]; ++r) {
        double sums[3];
        top_candidates_row(a.x.at<float>(r), a.x.shape[1], a.temperature.ptr<float>()[r],
                           a.ids.ptr<int32_t>() + r * C, a.values.ptr<float>() + r * C, C, sums,
                           a.bad.ptr<int32_t>() + r);
        std::memcpy(a.sums.ptr<int64_t>() + 3 * r, sums, sizeof(sums));
    }
}

}  // namespace di::ops
