// Prompt prefix cache: copies of sequence states taken at prefill chunk boundaries, keyed by the tokens
// before them, so a request whose prompt starts with a cached prefix (the next turn of a chat, a shared
// system prompt resent) restores the copy and prefills only the rest.
//
// Kept only at multiples of the prefill chunk, and only as prefill left them: the scheduler's chunk
// boundaries are multiples of the chunk counted from the prompt's start, so a request restored at one runs
// the same chunks on the same state as without the cache, and its output is bit-identical. (A state that
// decoding reached is not kept: one-token steps and prefill chunks may round differently.)
//
// The entries live in the engine's state memory, in what no running request reserves; admission evicts
// them (least recently used first) whenever a request needs the room. Used by the engine's loop thread.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/model.h"

namespace di::runtime {

class PrefixCache {
  public:
    explicit PrefixCache(int64_t chunk);

    // The last chunk boundary before a prompt's last token (a request with the same prompt must still run
    // that token for its logits), 0 for none: the prompt's state kept there serves the next turn of a chat.
    int64_t keep_point(int64_t n_prompt) const;
    // Whether the state at boundary `at` of a prompt of n tokens is kept: the keep point, and the boundaries
    // a power of two chunks long before it, so a prompt sharing only its beginning with an earlier one (a
    // system prompt) restores at least half of what they share.
    bool keeps(int64_t at, int64_t n_prompt) const;

    struct Hit {
        std::shared_ptr<const model::SequenceState> state;  // held: evict() leaves it until released
        int64_t n_tokens = 0;
    };
    // The longest entry of `salt` (Request::cache_salt) whose tokens begin `prompt` and are fewer than it;
    // marks it the most recently used.
    std::optional<Hit> lookup(std::span<const int32_t> prompt, std::string_view salt = {});
    // About the tokens lookup() would restore (0: none), from a prompt's boundary_keys() by key alone (no
    // pass over the tokens: for admission's decisions, which a lookup then confirms).
    int64_t cached_length(std::span<const uint64_t> keys) const;
    // The keys of a prompt's chunk boundaries up to its keep point (key i: salt and the first (i + 1) * chunk
    // tokens): two prompts share their first i + 1 chunks where their first i + 1 keys are equal (up to a
    // 2^-64 chance, which a lookup's token comparison rules out; these only steer admission).
    std::vector<uint64_t> boundary_keys(std::span<const int32_t> prompt, std::string_view salt = {}) const;
    // The longest boundary a prompt of n tokens keeps (keeps()) at or below `limit`, 0 for none.
    int64_t kept_at_most(int64_t limit, int64_t n_prompt) const;
    int64_t chunk() const { return chunk_; }
    bool contains(std::span<const int32_t> prefix, std::string_view salt = {}) const;

    // Keeps `state` (holding exactly `prefix`, a multiple of the chunk long) accounted as `bytes` of the
    // memory of `home` (Model::state_homes).
    void insert(std::span<const int32_t> prefix, std::unique_ptr<model::SequenceState> state, int64_t bytes,
                std::string_view salt = {}, int home = 0);
    // Drops least recently used entries of `home` that nobody holds until `need` bytes are freed or none is
    // left; returns the bytes freed.
    int64_t evict(int64_t need, int home = 0);

    int64_t bytes() const { return bytes_; }
    size_t size() const { return entries_.size(); }

  private:
    struct Entry {
        uint64_t key = 0;
        std::string salt;
        std::vector<int32_t> tokens;
        std::shared_ptr<const model::SequenceState> state;
        int64_t bytes = 0;
        int home = 0;
    };
    using List = std::list<Entry>;  // most recently used first
    List::iterator find(std::span<const int32_t> prefix, std::string_view salt, uint64_t key) const;
    List::iterator longest(std::span<const int32_t> prompt, std::string_view salt) const;

    int64_t chunk_;
    mutable List entries_;
    std::unordered_map<uint64_t, List::iterator> by_key_;  // key: hash of the entry's salt and tokens
    int64_t bytes_ = 0;
};

}  // namespace di::runtime
