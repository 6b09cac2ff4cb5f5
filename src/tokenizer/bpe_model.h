// Byte-level BPE: merges applied by rank to the bytes of one pre-tokenized word.
// ref: tokenizers (Rust) models/bpe/word.rs Word::merge_all (lowest rank first, ties to the leftmost pair).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace di::tok {

class BpeModel {
  public:
    // vocab: token text (byte-level alphabet) -> id; merges: "left right" pairs in rank order.
    static Result<BpeModel> build(const std::vector<std::pair<std::string, int32_t>>& vocab,
                                  const std::vector<std::pair<std::string, std::string>>& merges,
                                  bool ignore_merges);

    // Appends the ids of `word` (raw bytes, non-empty) to `out`.
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

    int32_t byte_id(uint8_t b) const { return byte_ids_[b]; }

  private:
    struct MergeSlot {
        uint64_t key = kEmpty;  // (left id << 32) | right id
        int32_t rank = 0;
        int32_t new_id = 0;
    };
    static constexpr uint64_t kEmpty = ~uint64_t{0};

    const MergeSlot* find_merge(int32_t left, int32_t right) const;
    void merge_small(std::vector<int32_t>& ids) const;
    void merge_heap(std::vector<int32_t>& ids) const;

    int32_t byte_ids_[256] = {};
    std::vector<MergeSlot> merges_;  // open addressing, power-of-two size
    uint64_t mask_ = 0;
    bool ignore_merges_ = false;
    std::unordered_map<std::string, int32_t> whole_words_;  // bytes -> id, only used with ignore_merges
};

}  // namespace di::tok
