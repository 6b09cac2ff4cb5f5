// UTF-8 validation per Unicode 15 table 3-7 (well-formed byte sequences) and the maximal-subpart rule.
#include "tokenizer/utf8.h"

namespace di::tok {

namespace {

// Allowed range of the second byte for each lead byte; later bytes are always 80..BF.
bool second_byte_ok(unsigned char lead, unsigned char b) {
    switch (lead) {
        case 0xE0:
            return b >= 0xA0 && b <= 0xBF;
        case 0xED:
            return b >= 0x80 && b <= 0x9F;  // excludes surrogates
        case 0xF0:
            return b >= 0x90 && b <= 0xBF;
        case 0xF4:
            return b >= 0x80 && b <= 0x8F;  // <= U+10FFFF
        default:
            return b >= 0x80 && b <= 0xBF;
    }
}

size_t sequence_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0;  // 80..C1, F5..FF never start a sequence
}

}  // namespace

size_t utf8_sequence(std::string_view s, size_t* bad_len, bool* truncated) {
    if (truncated) *truncated = false;
    const auto lead = static_cast<unsigned char>(s[0]);
    const size_t n = sequence_length(lead);
    if (n == 0) {
        *bad_len = 1;
        return 0;
    }
    for (size_t i = 1; i < n; ++i) {
        if (i >= s.size()) {
            if (truncated) *truncated = true;
            *bad_len = i;
            return 0;
        }
        const auto b = static_cast<unsigned char>(s[i]);
        const bool ok = i == 1 ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
        if (!ok) {
            *bad_len = i;
            return 0;
        }
    }
    return n;
}

bool utf8_valid(std::string_view s) { return utf8_first_invalid(s) == std::string_view::npos; }

size_t utf8_first_invalid(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        if (static_cast<unsigned char>(s[i]) < 0x80) {
            ++i;
            continue;
        }
        size_t bad = 0;
        const size_t n = utf8_sequence(s.substr(i), &bad);
        if (n == 0) return i;
        i += n;
    }
    return std::string_view::npos;
}

std::string utf8_sanitize(std::string_view s) {
    if (utf8_valid(s)) return std::string(s);
    std::string out;
    out.reserve(s.size() + 16);
    size_t i = 0;
    while (i < s.size()) {
        size_t bad = 0;
        const size_t n = utf8_sequence(s.substr(i), &bad);
        if (n > 0) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out.append(kReplacementChar);
            i += bad;
        }
    }
    return out;
}

size_t utf8_complete_prefix(std::string_view s) {
    // Only the last 3 bytes can belong to an incomplete sequence.
    const size_t start = s.size() > 3 ? s.size() - 3 : 0;
    for (size_t i = start; i < s.size(); ++i) {
        if (static_cast<unsigned char>(s[i]) < 0x80) continue;
        size_t bad = 0;
        bool truncated = false;
        if (utf8_sequence(s.substr(i), &bad, &truncated) == 0 && truncated) return i;
    }
    return s.size();
}

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

}  // namespace di::tok
