// Added (special) tokens are cut out of the text before pre-tokenization and never split.
// ref: tokenizers (Rust) tokenizer/added_vocabulary.rs: leftmost-longest matching, first over the tokens
// with normalized=false, then over the normalized=true ones inside the remaining gaps.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace di::tok {

// Trie over byte strings; find() returns the leftmost-longest match.
class TokenMatcher {
  public:
    void add(std::string_view text, int32_t id);
    bool empty() const { return nodes_.size() <= 1; }

    struct Match {
        size_t begin = 0, end = 0;
        int32_t id = -1;
    };
    // First match starting at or after `from`; id == -1 when none.
    Match find(std::string_view text, size_t from) const;

  private:
    struct Node {
        std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
        int32_t id = -1;
    };
    int32_t child(int32_t node, unsigned char b) const;
    std::vector<Node> nodes_{Node{}};
    bool first_byte_[256] = {};
};

// A piece of input: either an added token (id >= 0) or text to pre-tokenize (id == -1).
struct Segment {
    std::string_view text;
    int32_t id = -1;
};

// Decides whether a match [begin, end) (offsets in the whole text) of token `id` counts; a refused match
// stays plain text. Empty: every match counts.
using MatchFilter = std::function<bool(size_t begin, size_t end, int32_t id)>;

// Splits `text` with `first` (non-normalized tokens), then the gaps with `second`.
void split_added_tokens(std::string_view text, const TokenMatcher& first, const TokenMatcher& second,
                        std::vector<Segment>& out, const MatchFilter& keep = {});

}  // namespace di::tok
