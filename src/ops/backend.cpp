// Backend's default argmax, for backends whose memory is the host's (a device backend implements its own).
#include "ops/backend.h"

#include <tuple>

namespace di::ops {

void Backend::argmax(const ArgmaxArgs& a) {
    check(a);
    DI_CHECK(a.x.device == Device::kHost && a.ids.device == Device::kHost && a.bad.device == Device::kHost,
             "argmax: backend {} has device memory and no argmax of its own", name());
    for (int64_t r = 0; r < a.x.shape[0]; ++r)
        std::tie(a.ids.ptr<int32_t>()[r], a.bad.ptr<int32_t>()[r]) =
            argmax_row(a.x.at<float>(r), a.x.shape[1]);
}

}  // namespace di::ops
