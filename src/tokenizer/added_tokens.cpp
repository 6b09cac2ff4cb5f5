// Trie matching for added tokens. Scanning skips bytes that cannot start a token (a 256-entry table), so
// plain text costs about one table lookup per byte.
#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace di::tok {

int32_t TokenMatcher::child(int32_t node, unsigned char b) const {
    const auto& ch = nodes_[node].children;
    auto it =
        std::lower_bound(ch.begin(), ch.end(), b, [](const auto& p, unsigned char v) { return p.first < v; });
    return it != ch.end() && it->first == b ? it->second : -1;
}

void TokenMatcher::add(std::string_view text, int32_t id) {
    if (text.empty()) return;
    first_byte_[static_cast<unsigned char>(text[0])] = true;
    int32_t node = 0;
    for (char c : text) {
        const auto b = static_cast<unsigned char>(c);
        int32_t next = child(node, b);
        if (next < 0) {
            next = static_cast<int32_t>(nodes_.size());
            nodes_.push_back(Node{});
            auto& ch = nodes_[node].children;
            auto it = std::lower_bound(ch.begin(), ch.end(), b,
                                       [](const auto& p, unsigned char v) { return p.first < v; });
            ch.insert(it, {b, next});
        }
        node = next;
    }
    nodes_[node].id = id;
}

TokenMatcher::Match TokenMatcher::find(std::string_view text, size_t from) const {
    for (size_t i = from; i < text.size(); ++i) {
        if (!first_byte_[static_cast<unsigned char>(text[i])]) continue;
        int32_t node = 0;
        Match best;
        for (size_t j = i; j < text.size(); ++j) {
            node = child(node, static_cast<unsigned char>(text[j]));
            if (node < 0) break;
            if (nodes_[node].id >= 0) best = Match{i, j + 1, nodes_[node].id};
        }
        if (best.id >= 0) return best;
    }
    return Match{};
}

namespace {

// `base` is the offset of `text` in the whole input (what `keep` is told).
void split_one(std::string_view text, size_t base, const TokenMatcher& m, const MatchFilter& keep,
               std::vector<Segment>& out) {
    if (m.empty()) {
        out.push_back({text, -1});
        return;
    }
    size_t pos = 0, search = 0;  // pos: start of the pending plain text; search: where to look next
    while (search < text.size()) {
        const TokenMatcher::Match hit = m.find(text, search);
        if (hit.id < 0) break;
        if (keep && !keep(base + hit.begin, base + hit.end, hit.id)) {
            search = hit.begin + 1;  // a refused match is plain text; a later or shorter one may still count
            continue;
        }
        if (hit.begin > pos) out.push_back({text.substr(pos, hit.begin - pos), -1});
        out.push_back({text.substr(hit.begin, hit.end - hit.begin), hit.id});
        pos = search = hit.end;
    }
    if (pos < text.size()) out.push_back({text.substr(pos), -1});
}

}  // namespace

void split_added_tokens(std::string_view text, const TokenMatcher& first, const TokenMatcher& second,
                        std::vector<Segment>& out, const MatchFilter& keep) {
    std::vector<Segment> stage;
    split_one(text, 0, first, keep, stage);
    for (const Segment& s : stage) {
        if (s.id >= 0) {
            out.push_back(s);
        } else {
            split_one(s.text, size_t(s.text.data() - text.data()), second, keep, out);
        }
    }
}

}  // namespace di::tok
