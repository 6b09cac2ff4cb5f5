#include "runtime/stop_conditions.h"

#include <algorithm>

namespace di::runtime {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
    for (auto& s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

StopStringMatcher::Output StopStringMatcher::push(std::string_view text) {
    Output out;
    if (stopped_) return out;
    held_.append(text);
    if (stops_.empty()) {
        out.text = std::move(held_);
        held_.clear();
        return out;
    }
    // Earliest match wins; among matches at one position the longest (it contains the others' starts).
    size_t best = std::string::npos;
    const std::string* which = nullptr;
    for (const auto& s : stops_) {
        const size_t pos = held_.find(s);
        if (pos == std::string::npos) continue;
        if (pos < best || (pos == best && s.size() > which->size())) {
            best = pos;
            which = &s;
        }
    }
    if (which) {
        out.text = held_.substr(0, best);
        out.stopped = true;
        out.matched = *which;
        stopped_ = true;
        held_.clear();
        return out;
    }
    // Hold back the longest suffix that is a proper prefix of some stop string. Stop strings start on a
    // character boundary, so the cut never splits a UTF-8 character.
    size_t keep = 0;
    for (const auto& s : stops_) {
        const size_t max_k = std::min(s.size() - 1, held_.size());
        for (size_t k = max_k; k > keep; --k)
            if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
                keep = k;
                break;
            }
    }
    out.text = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopStringMatcher::finish() {
    std::string s = stopped_ ? std::string() : std::move(held_);
    held_.clear();
    return s;
}

TokenStopCheck::TokenStopCheck(std::vector<int32_t> stop_ids, int64_t max_new_tokens)
    : stop_ids_(std::move(stop_ids)), max_new_(max_new_tokens) {}

StopKind TokenStopCheck::on_token(int32_t id, int64_t n_generated) const {
    if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) return StopKind::kStopToken;
    if (n_generated >= max_new_) return StopKind::kLength;
    return StopKind::kNone;
}

}  // namespace di::runtime
