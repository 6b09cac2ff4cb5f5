#include "ops/kernel_variants.h"

namespace di::ops {

AllowList AllowList::all_of(std::string backend, const std::vector<KernelVariant>& variants) {
    AllowList l;
    l.backend_ = std::move(backend);
    for (const KernelVariant& v : variants) l.allow(v.op, v.name);
    return l;
}

AllowList AllowList::fallbacks_of(std::string backend, const std::vector<KernelVariant>& variants) {
    AllowList l;
    l.backend_ = std::move(backend);
    for (const KernelVariant& v : variants)
        if (v.fallback) l.allow(v.op, v.name);
    return l;
}

bool AllowList::allows(std::string_view op, std::string_view variant) const {
    return pairs_.count({std::string(op), std::string(variant)}) > 0;
}

}  // namespace di::ops
