// One op's kernel variants in the CUDA backend: the order dispatch prefers them in, which of them the
// active allow-list permits, a variant forced by a test or the screen, and how often each ran.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "ops/kernel_variants.h"

namespace di::ops::cuda_impl {

class OpVariants {
  public:
    // `variants` in preference order; the last must be a fallback that takes every case.
    explicit OpVariants(std::vector<KernelVariant> variants)
        : variants_(std::move(variants)),
          allowed_(variants_.size(), true),
          counts_(std::make_unique<std::atomic<int64_t>[]>(variants_.size())) {
        DI_CHECK(!variants_.empty() && variants_.back().fallback, "op variants need a fallback last");
    }

    // The variant to run for one call: the forced one, which must take the case (`takes(i, true)`; a
    // forced variant may accept more than dispatch would give it), else the first allowed variant with
    // `takes(i, false)`. `what` describes the case for the error message. Counts the dispatch.
    template <class Takes, class What>
    int choose(Takes&& takes, What&& what) {
        int v = forced_;
        if (v >= 0) {
            DI_CHECK(takes(v, true), "{}: variant '{}' forced where it does not apply ({})", variants_[0].op,
                     variants_[size_t(v)].name, what());
        } else {
            v = int(variants_.size()) - 1;
            for (int i = 0; i + 1 < int(variants_.size()); ++i)
                if (allowed_[size_t(i)] && takes(i, false)) {
                    v = i;
                    break;
                }
        }
        ++counts_[size_t(v)];
        return v;
    }

    // The variant choose() would return (counting nothing); count_dispatch(i) then counts it.
    template <class Takes>
    int pick(Takes&& takes) const {
        if (forced_ >= 0) return forced_;
        for (int j = 0; j + 1 < int(variants_.size()); ++j)
            if (allowed_[size_t(j)] && takes(j, false)) return j;
        return int(variants_.size()) - 1;
    }
    // Whether choose() would return variant `i`.
    template <class Takes>
    bool picks(int i, Takes&& takes) const {
        return pick(takes) == i;
    }
    void count_dispatch(int i, int64_t times = 1) { counts_[size_t(i)] += times; }
    // Whether the default dispatch may give a call to variant `i` (allowed, and no variant forced).
    bool dispatches(int i) const { return forced_ < 0 && allowed_[size_t(i)]; }

    // "" restores the default dispatch; false for an unknown name.
    bool force(std::string_view name) {
        if (name.empty()) return forced_ = -1, true;
        for (size_t i = 0; i < variants_.size(); ++i)
            if (variants_[i].name == name) return forced_ = int(i), true;
        return false;
    }
    void allow(const AllowList& l) {
        for (size_t i = 0; i < variants_.size(); ++i)
            allowed_[i] = variants_[i].fallback || l.allows(variants_[i].op, variants_[i].name);
    }
    // -1 for an unknown variant.
    int64_t count(std::string_view name) const {
        for (size_t i = 0; i < variants_.size(); ++i)
            if (variants_[i].name == name) return counts_[i].load();
        return -1;
    }
    const std::string& op() const { return variants_[0].op; }
    const std::vector<KernelVariant>& variants() const { return variants_; }

  private:
    std::vector<KernelVariant> variants_;
    std::vector<bool> allowed_;
    int forced_ = -1;
    std::unique_ptr<std::atomic<int64_t>[]> counts_;  // read by /metrics while the engine runs
};

}  // namespace di::ops::cuda_impl
