// BPE merge loop. Short words use a rescan per merge (cheap, cache-friendly); long words use the same
// heap algorithm as tokenizers. Both merge the adjacent pair with the lowest (rank, position) each step,
// so they produce identical ids; the corpus test covers both paths.
#include "tokenizer/bpe_model.h"

#include <queue>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace di::tok {

namespace {

constexpr size_t kSmallWord = 48;  // below this many bytes the O(n^2) rescan beats the heap

uint64_t mix(uint64_t k) {  // splitmix64 finaliser
    k ^= k >> 31;
    k *= 0x7fb5d329728ea185ULL;
    k ^= k >> 27;
    k *= 0x81dadef4bc2dd44dULL;
    k ^= k >> 33;
    return k;
}

uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

Result<BpeModel> BpeModel::build(const std::vector<std::pair<std::string, int32_t>>& vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 bool ignore_merges) {
    BpeModel m;
    m.ignore_merges_ = ignore_merges;
    std::unordered_map<std::string, int32_t> by_text;
    by_text.reserve(vocab.size() * 2);
    for (const auto& [text, id] : vocab) by_text.emplace(text, id);
    for (int b = 0; b < 256; ++b) {
        std::string ch;
        utf8_append(ch, byte_to_codepoint(static_cast<uint8_t>(b)));
        auto it = by_text.find(ch);
        if (it == by_text.end())
            return make_error(ErrorCode::kFormat,
                              "tokenizer.json: model.vocab lacks the byte-level token for byte 0x{:02X}", b);
        m.byte_ids_[b] = it->second;
    }
    size_t cap = 1;
    while (cap < merges.size() * 2 + 2) cap <<= 1;
    m.merges_.assign(cap, MergeSlot{});
    m.mask_ = cap - 1;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [l, r] = merges[rank];
        auto li = by_text.find(l), ri = by_text.find(r), ni = by_text.find(l + r);
        if (li == by_text.end() || ri == by_text.end() || ni == by_text.end())
            return make_error(
                ErrorCode::kFormat,
                "tokenizer.json: model.merges[{}] '{} {}' uses a token missing from model.vocab", rank, l, r);
        const uint64_t key = pair_key(li->second, ri->second);
        uint64_t h = mix(key) & m.mask_;
        while (m.merges_[h].key != kEmpty && m.merges_[h].key != key) h = (h + 1) & m.mask_;
        // A repeated pair overwrites the earlier entry, as tokenizers' HashMap collect does.
        m.merges_[h] = MergeSlot{key, static_cast<int32_t>(rank), ni->second};
    }
    if (ignore_merges) {
        for (const auto& [text, id] : vocab) {
            if (auto bytes = byte_level_to_bytes(text)) m.whole_words_.emplace(std::move(*bytes), id);
        }
    }
    return m;
}

const BpeModel::MergeSlot* BpeModel::find_merge(int32_t left, int32_t right) const {
    const uint64_t key = pair_key(left, right);
    uint64_t h = mix(key) & mask_;
    while (true) {
        const MergeSlot& s = merges_[h];
        if (s.key == key) return &s;
        if (s.key == kEmpty) return nullptr;
        h = (h + 1) & mask_;
    }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        auto it = whole_words_.find(std::string(word));
        if (it != whole_words_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    std::vector<int32_t> ids(word.size());
    for (size_t i = 0; i < word.size(); ++i) ids[i] = byte_ids_[static_cast<uint8_t>(word[i])];
    if (ids.size() <= kSmallWord) {
        merge_small(ids);
    } else {
        merge_heap(ids);
    }
    out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::merge_small(std::vector<int32_t>& ids) const {
    while (ids.size() > 1) {
        int32_t best_rank = INT32_MAX, best_id = 0;
        size_t best_pos = 0;
        for (size_t i = 0; i + 1 < ids.size(); ++i) {
            const MergeSlot* s = find_merge(ids[i], ids[i + 1]);
            if (s && s->rank < best_rank) {
                best_rank = s->rank;
                best_id = s->new_id;
                best_pos = i;
            }
        }
        if (best_rank == INT32_MAX) return;
        ids[best_pos] = best_id;
        ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best_pos) + 1);
    }
}

void BpeModel::merge_heap(std::vector<int32_t>& ids) const {
    struct Symbol {
        int32_t id;
        int32_t prev, next;  // -1 at the ends
        bool alive;
    };
    struct Merge {
        int32_t rank;
        int32_t pos;
        int32_t new_id;
        bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    const auto n = static_cast<int32_t>(ids.size());
    std::vector<Symbol> sym(ids.size());
    for (int32_t i = 0; i < n; ++i) sym[i] = Symbol{ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
    std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue;
    for (int32_t i = 0; i + 1 < n; ++i)
        if (const MergeSlot* s = find_merge(sym[i].id, sym[i + 1].id)) queue.push({s->rank, i, s->new_id});
    while (!queue.empty()) {
        const Merge top = queue.top();
        queue.pop();
        Symbol& cur = sym[top.pos];
        if (!cur.alive || cur.next < 0) continue;
        const Symbol right = sym[cur.next];
        const MergeSlot* s = find_merge(cur.id, right.id);
        if (!s || s->new_id != top.new_id) continue;  // stale entry
        cur.id = top.new_id;
        sym[cur.next].alive = false;
        cur.next = right.next;
        if (right.next >= 0) sym[right.next].prev = top.pos;
        if (cur.prev >= 0)
            if (const MergeSlot* p = find_merge(sym[cur.prev].id, cur.id))
                queue.push({p->rank, cur.prev, p->new_id});
        if (cur.next >= 0)
            if (const MergeSlot* q = find_merge(cur.id, sym[cur.next].id))
                queue.push({q->rank, top.pos, q->new_id});
    }
    ids.clear();
    for (int32_t i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

}  // namespace di::tok
