#include "runtime/prefix_cache.h"

#include <algorithm>

#include "core/check.h"

namespace di::runtime {
namespace {

// FNV-1a over the salt's length and bytes, then the token ids, extended chunk by chunk during a lookup; a hit
// is confirmed on the salt and the tokens.
constexpr uint64_t kPrime = 1099511628211ull;
uint64_t hash_start(std::string_view salt) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t n = salt.size(), b = 0; b < 8; ++b, n >>= 8) h = (h ^ (n & 0xffu)) * kPrime;
    for (const char c : salt) h = (h ^ uint8_t(c)) * kPrime;
    return h;
}
uint64_t hash_more(uint64_t h, std::span<const int32_t> tokens) {
    for (const int32_t t : tokens) {
        auto u = uint32_t(t);
        for (int b = 0; b < 4; ++b, u >>= 8) h = (h ^ (u & 0xffu)) * kPrime;
    }
    return h;
}

}  // namespace

PrefixCache::PrefixCache(int64_t chunk) : chunk_(chunk) {
    DI_CHECK(chunk >= 1, "prefix cache chunk {}", chunk);
}

int64_t PrefixCache::keep_point(int64_t n_prompt) const {
    return n_prompt < 1 ? 0 : (n_prompt - 1) / chunk_ * chunk_;
}

bool PrefixCache::keeps(int64_t at, int64_t n_prompt) const {
    if (at <= 0 || at % chunk_ != 0 || at > keep_point(n_prompt)) return false;
    const int64_t chunks = at / chunk_;
    return at == keep_point(n_prompt) || (chunks & (chunks - 1)) == 0;
}

PrefixCache::List::iterator PrefixCache::find(std::span<const int32_t> prefix, std::string_view salt,
                                              uint64_t key) const {
    const auto it = by_key_.find(key);
    if (it == by_key_.end() || it->second->salt != salt) return entries_.end();
    const std::vector<int32_t>& t = it->second->tokens;
    return std::equal(t.begin(), t.end(), prefix.begin(), prefix.end()) ? it->second : entries_.end();
}

PrefixCache::List::iterator PrefixCache::longest(std::span<const int32_t> prompt,
                                                 std::string_view salt) const {
    const int64_t last = keep_point(int64_t(prompt.size()));
    auto best = entries_.end();
    uint64_t h = hash_start(salt);
    for (int64_t at = chunk_; at <= last && !by_key_.empty(); at += chunk_) {
        h = hash_more(h, prompt.subspan(size_t(at - chunk_), size_t(chunk_)));
        if (const auto it = find(prompt.first(size_t(at)), salt, h); it != entries_.end()) best = it;
    }
    return best;
}

std::vector<uint64_t> PrefixCache::boundary_keys(std::span<const int32_t> prompt,
                                                 std::string_view salt) const {
    std::vector<uint64_t> keys;
    uint64_t h = hash_start(salt);
    for (int64_t at = chunk_; at <= keep_point(int64_t(prompt.size())); at += chunk_)
        keys.push_back(h = hash_more(h, prompt.subspan(size_t(at - chunk_), size_t(chunk_))));
    return keys;
}

int64_t PrefixCache::kept_at_most(int64_t limit, int64_t n_prompt) const {
    const int64_t last = keep_point(n_prompt);
    if (limit >= last) return last;
    int64_t at = 0;  // the largest power-of-two number of chunks within the limit
    for (int64_t c = 1; c * chunk_ <= limit; c *= 2) at = c * chunk_;
    return at;
}

int64_t PrefixCache::cached_length(std::span<const uint64_t> keys) const {
    for (size_t i = keys.size(); i-- > 0;)
        if (by_key_.count(keys[i])) return int64_t(i + 1) * chunk_;
    return 0;
}

std::optional<PrefixCache::Hit> PrefixCache::lookup(std::span<const int32_t> prompt, std::string_view salt) {
    const auto best = longest(prompt, salt);
    if (best == entries_.end()) return std::nullopt;
    entries_.splice(entries_.begin(), entries_, best);
    return Hit{best->state, int64_t(best->tokens.size())};
}

bool PrefixCache::contains(std::span<const int32_t> prefix, std::string_view salt) const {
    return find(prefix, salt, hash_more(hash_start(salt), prefix)) != entries_.end();
}

void PrefixCache::insert(std::span<const int32_t> prefix, std::unique_ptr<model::SequenceState> state,
                         int64_t bytes, std::string_view salt, int home) {
    DI_CHECK(!prefix.empty() && int64_t(prefix.size()) % chunk_ == 0 && state &&
                 state->n_tokens() == int64_t(prefix.size()),
             "prefix cache entry of {} tokens (chunk {})", prefix.size(), chunk_);
    const uint64_t key = hash_more(hash_start(salt), prefix);
    if (by_key_.count(key)) return;  // kept already (or, by a 2^-64 chance, another prefix of that hash)
    entries_.push_front(Entry{key, std::string(salt), std::vector<int32_t>(prefix.begin(), prefix.end()),
                              std::move(state), bytes, home});
    by_key_.emplace(key, entries_.begin());
    bytes_ += bytes;
}

int64_t PrefixCache::evict(int64_t need, int home) {
    int64_t freed = 0;
    for (auto it = entries_.end(); freed < need && it != entries_.begin();) {
        --it;
        if (it->state.use_count() > 1 || it->home != home) continue;  // a hit not yet restored, elsewhere
        freed += it->bytes;
        bytes_ -= it->bytes;
        by_key_.erase(it->key);
        it = entries_.erase(it);
    }
    return freed;
}

}  // namespace di::runtime
