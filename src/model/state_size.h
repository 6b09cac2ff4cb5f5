// Byte accounting of one sequence's state: the one formula that admission, inspect and bench use. Header-only
// so the admission arithmetic (fuzzed on its own) needs nothing else.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace di::model {

struct StateSize {
    int64_t fixed_bytes = 0;     // independent of length: rings, buffers, overlaps
    double bytes_per_token = 0;  // compressed entries (amortised: d * 4 / rate per compressed layer)

    // Rounded up (a layer holds floor(capacity / rate) entries, never more than the amortised rate says),
    // saturated at INT64_MAX (a demand no budget meets) instead of overflowing for huge capacities.
    int64_t bytes_for(int64_t capacity) const {
        const double bytes =
            double(fixed_bytes) + std::ceil(bytes_per_token * double(std::max<int64_t>(capacity, 0)));
        return !(bytes < 9.2e18) ? INT64_MAX : int64_t(bytes);  // NaN too
    }
};

}  // namespace di::model
