// Byte <-> code point table of the GPT-2 byte-level alphabet.
#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace di::tok {

namespace {

struct Tables {
    std::array<uint32_t, 256> byte_to_cp{};
    std::array<int16_t, 324> cp_to_byte{};  // all alphabet code points are < 324
    Tables() {
        cp_to_byte.fill(-1);
        uint32_t extra = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable =
                (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            byte_to_cp[b] = printable ? static_cast<uint32_t>(b) : 256 + extra++;
            cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
        }
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().byte_to_cp[b]; }

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
    const Tables& t = tables();
    std::string out;
    size_t i = 0;
    while (i < token.size()) {
        size_t bad = 0;
        const size_t n = utf8_sequence(token.substr(i), &bad);
        if (n == 0) return std::nullopt;
        uint32_t cp = static_cast<unsigned char>(token[i]);
        if (n == 2) cp = ((cp & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
        if (n > 2 || cp >= t.cp_to_byte.size() || t.cp_to_byte[cp] < 0) return std::nullopt;
        out.push_back(static_cast<char>(t.cp_to_byte[cp]));
        i += n;
    }
    return out;
}

std::string byte_level_decode_token(std::string_view token) {
    auto bytes = byte_level_to_bytes(token);
    return bytes ? std::move(*bytes) : std::string(token);
}

}  // namespace di::tok
