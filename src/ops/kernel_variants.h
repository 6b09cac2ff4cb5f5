// Kernel variants and the allow-list dispatch obeys (DESIGN.md section 4). A backend lists, per op, the
// variants it has: the verified fallbacks (always allowed: an incomplete list costs speed, never
// correctness) and faster ones that run only where the active allow-list names them. `deepinfer screen`
// proves variants on a model's own shapes and writes such a list; `--kernels FILE` loads one.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace di::ops {

struct KernelVariant {
    std::string op, name;
    std::string claims;           // the shape/format classes it takes, in words
    bool fallback = false;        // a verified default: always allowed
    bool deterministic = true;    // the same inputs give the same bits
    bool batch_invariant = true;  // a row's bits do not depend on the other rows
    // A stated accuracy beyond f32 sums (relative L2), with its reason in `claims`: the least tolerance the
    // screen holds this variant to (0: the f32 bound alone).
    double tolerance = 0;
};

class AllowList {
  public:
    // Every variant of `variants` (the built-in list: each was proven by the op tests).
    static AllowList all_of(std::string backend, const std::vector<KernelVariant>& variants);
    // Only the fallbacks.
    static AllowList fallbacks_of(std::string backend, const std::vector<KernelVariant>& variants);

    bool allows(std::string_view op, std::string_view variant) const;
    void allow(std::string op, std::string variant) { pairs_.emplace(std::move(op), std::move(variant)); }
    const std::string& backend() const { return backend_; }
    const std::set<std::pair<std::string, std::string>>& pairs() const { return pairs_; }

  private:
    std::string backend_;
    std::set<std::pair<std::string, std::string>> pairs_;
};

}  // namespace di::ops
