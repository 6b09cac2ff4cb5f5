// Trie matching for added tokens. Scanning skips bytes that cannot start a token (a 256-entry table), so
// plain text costs about one table lookup per byte.
#include "tokenizer/added_tokens.h"

#include <algorithm>

namespace di::tok {

int32_t TokenMatcher::child(int32_t node, unsigned char b) const {
    const auto& ch = nodes_[node].children;
    auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& p, unsigned char v) { return p.first < v; });
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
            auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& p, unsigned char v) { return p.first < v; });
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

void split_one(std::string_view text, const TokenMatcher& m, std::vector<Segment>& out) {
    if (m.empty()) {
        out.push_back({text, -1});
        return;
    }
    size_t pos = 0;
    while (pos < text.size()) {
        const TokenMatcher::Match hit = m.find(text, pos);
        if (hit.id < 0) break;
        if (hit.begin > pos) out.push_back({text.substr(pos, hit.begin - pos), -1});
        out.push_back({text.substr(hit.begin, hit.end - hit.begin), hit.id});
        pos = hit.end;
    }
    if (pos < text.size()) out.push_back({text.substr(pos), -1});
}

}  // namespace

void split_added_tokens(std::string_view text, const TokenMatcher& first, const TokenMatcher& second,
                        std::vector<Segment>& out) {
    std::vector<Segment> stage;
    split_one(text, first, stage);
    for (const Segment& s : stage) {
        if (s.id >= 0) {
            out.push_back(s);
        } else {
            split_one(s.text, second, out);
        }
    }
}

}  // namespace di::tok
