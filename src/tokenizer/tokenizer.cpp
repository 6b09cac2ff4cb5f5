// Public Tokenizer: added-token split -> regex pre-tokenization -> byte-level BPE, with a per-call word
// cache (text repeats words heavily; a per-call cache needs no locking across threads).
#include "deepinfer/tokenizer.h"

#include <unordered_map>

#include "tokenizer/tokenizer_model.h"
#include "tokenizer/utf8.h"

namespace di {

namespace {

constexpr size_t kCacheMaxWord = 64;          // longer pieces are rare and not worth hashing
constexpr size_t kCacheMaxEntries = 1 << 17;  // ~10 MB per thread at most; cleared when full

// Per-thread word -> ids cache (no locks). `serial` ties it to one loaded model; a new model clears it.
struct WordCache {
    uint64_t serial = 0;
    std::unordered_map<std::string, std::vector<int32_t>> words;
};

WordCache& thread_cache(uint64_t serial) {
    thread_local WordCache cache;
    if (cache.serial != serial || cache.words.size() >= kCacheMaxEntries) {
        cache.words.clear();
        cache.serial = serial;
    }
    return cache;
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::string& path) {
    DI_TRY(tok::TokenizerModel m, tok::load_tokenizer_model(path));
    return Tokenizer(std::make_shared<const tok::TokenizerModel>(std::move(m)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const { return encode(text, model_->add_bos); }

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
    return encode(text, add_bos, {});
}

std::optional<size_t> Tokenizer::invalid_utf8_offset(std::string_view text) {
    const size_t at = tok::utf8_first_invalid(text);
    if (at == std::string_view::npos) return std::nullopt;
    return at;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       std::span<const TextRange> plain) const {
    const tok::TokenizerModel& m = *model_;
    std::string sanitized;
    bool all_plain = false;
    if (!tok::utf8_valid(text)) {
        sanitized = tok::utf8_sanitize(text);
        text = sanitized;
        all_plain = !plain.empty();  // offsets moved: no special token may come from the caller's ranges
    }
    tok::MatchFilter keep;
    if (!plain.empty())
        keep = [&](size_t begin, size_t end, int32_t) {
            if (all_plain) return false;
            for (const TextRange& r : plain)
                if (begin < r.end && r.begin < end) return false;
            return true;
        };
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    if (add_bos && m.bos_id >= 0) ids.push_back(m.bos_id);

    std::vector<tok::Segment> segments;
    tok::split_added_tokens(text, m.added_raw, m.added_normalized, segments, keep);
    WordCache& cache = thread_cache(m.serial);
    std::vector<std::string_view> pieces;
    std::string key;
    for (const tok::Segment& seg : segments) {
        if (seg.id >= 0) {
            ids.push_back(seg.id);
            continue;
        }
        pieces.clear();
        m.pretokenizer.split(seg.text, pieces);
        for (std::string_view piece : pieces) {
            if (piece.size() > kCacheMaxWord) {
                m.bpe.encode_word(piece, ids);
                continue;
            }
            key.assign(piece);
            auto it = cache.words.find(key);
            if (it == cache.words.end()) {
                std::vector<int32_t> word;
                m.bpe.encode_word(piece, word);
                it = cache.words.emplace(key, std::move(word)).first;
            }
            ids.insert(ids.end(), it->second.begin(), it->second.end());
        }
    }
    return ids;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
    std::string bytes;
    for (size_t i = 0; i < ids.size(); ++i) {
        const int32_t id = ids[i];
        if (id < 0 || id >= vocab_size())
            return make_error(ErrorCode::kOutOfRange, "detokenize: token #{} has id {}, outside [0, {})", i,
                              id, vocab_size());
        if (skip_special && model_->special[id]) continue;
        bytes += model_->bytes[id];
    }
    return tok::utf8_sanitize(bytes);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(model_->text.size()); }
int32_t Tokenizer::bos_id() const { return model_->bos_id; }
int32_t Tokenizer::eos_id() const { return model_->eos_id; }
bool Tokenizer::add_bos() const { return model_->add_bos; }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
    const std::string key(token);
    if (auto it = model_->added_by_text.find(key); it != model_->added_by_text.end()) return it->second;
    if (auto it = model_->vocab_by_text.find(key); it != model_->vocab_by_text.end()) return it->second;
    return std::nullopt;
}

std::string_view Tokenizer::token_text(int32_t id) const {
    return id >= 0 && id < vocab_size() ? std::string_view(model_->text[id]) : std::string_view();
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
    return id >= 0 && id < vocab_size() ? std::string_view(model_->bytes[id]) : std::string_view();
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && model_->special[id]; }

bool Tokenizer::is_added(int32_t id) const {
    if (id < 0 || id >= vocab_size()) return false;
    const auto it = model_->added_by_text.find(model_->text[size_t(id)]);
    return it != model_->added_by_text.end() && it->second == id;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

Result<std::string> StreamDecoder::push(int32_t id) {
    if (id < 0 || id >= tokenizer_.vocab_size())
        return make_error(ErrorCode::kOutOfRange, "detokenize: id {} outside [0, {})", id,
                          tokenizer_.vocab_size());
    if (skip_special_ && tokenizer_.is_special(id)) return std::string();
    pending_ += tokenizer_.token_bytes(id);
    const size_t n = tok::utf8_complete_prefix(pending_);
    std::string out = tok::utf8_sanitize(std::string_view(pending_).substr(0, n));
    pending_.erase(0, n);
    return out;
}

std::string StreamDecoder::finish() {
    std::string out = tok::utf8_sanitize(pending_);
    pending_.clear();
    return out;
}

}  // namespace di
