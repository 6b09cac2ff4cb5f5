// Two-level lookup (256-code-point blocks) built once from the generated range list.
#include "tokenizer/unicode_classes.h"

#include <array>
#include <memory>
#include <vector>

#include "tokenizer/utf8.h"

namespace di::tok {

namespace {

struct Range {
    uint32_t first, last;
    uint8_t cls;
};

constexpr Range kRanges[] = {
#include "tokenizer/unicode_groups.inc"
};

constexpr uint32_t kBlocks = 0x110000 >> 8;

struct Table {
    std::array<uint8_t, kBlocks> uniform{};  // class when the block is uniform
    std::array<int32_t, kBlocks> detail{};   // index into `blocks` or -1
    std::vector<std::array<uint8_t, 256>> blocks;
    Table() {
        std::vector<uint8_t> all(0x110000, 0);  // ASCII and surrogates: kKeep
        for (const Range& r : kRanges)
            for (uint32_t cp = r.first; cp <= r.last; ++cp) all[cp] = r.cls;
        for (uint32_t b = 0; b < kBlocks; ++b) {
            const uint8_t* p = &all[b << 8];
            bool same = true;
            for (int i = 1; i < 256 && same; ++i) same = p[i] == p[0];
            if (same) {
                uniform[b] = p[0];
                detail[b] = -1;
            } else {
                detail[b] = static_cast<int32_t>(blocks.size());
                blocks.emplace_back();
                std::copy(p, p + 256, blocks.back().begin());
            }
        }
    }
};

const Table& table() {
    static const Table t;
    return t;
}

// Stand-ins by class and UTF-8 length (2, 3, 4 bytes); 0 = keep the original.
constexpr uint32_t kStandIn[6][3] = {
    {0, 0, 0},                  // keep
    {0x00B2, 0x0966, 0x10107},  // N: SUPERSCRIPT TWO, DEVANAGARI DIGIT ZERO, AEGEAN NUMBER ONE
    {0x00C0, 0x0800, 0x10000},  // L|M: LATIN CAPITAL A WITH GRAVE, SAMARITAN LETTER ALAF, LINEAR B SYLLABLE A
    {0x00A1, 0x2010, 0x10100},  // P|S: INVERTED EXCLAMATION, HYPHEN, AEGEAN WORD SEPARATOR LINE
    {0x0085, 0x2000, 0},        // space: NEL, EN QUAD (no 4-byte spaces exist)
    {0x0080, 0xE000, 0xF0000},  // other: a C1 control, private use
};

}  // namespace

CodeClass code_class(uint32_t cp) {
    if (cp >= 0x110000) return CodeClass::kKeep;
    const Table& t = table();
    const int32_t d = t.detail[cp >> 8];
    return static_cast<CodeClass>(d < 0 ? t.uniform[cp >> 8] : t.blocks[d][cp & 0xFF]);
}

bool map_to_standins(std::string_view text, std::string& out) {
    size_t i = 0;
    while (i < text.size() && static_cast<unsigned char>(text[i]) < 0x80) ++i;
    if (i == text.size()) return false;
    out.assign(text);
    while (i < text.size()) {
        const auto lead = static_cast<unsigned char>(text[i]);
        if (lead < 0x80) {
            ++i;
            continue;
        }
        const size_t n = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;  // input is valid UTF-8
        uint32_t cp = lead & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
        for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
        const uint32_t stand_in = kStandIn[static_cast<int>(code_class(cp))][n - 2];
        if (stand_in != 0) {
            std::string enc;
            utf8_append(enc, stand_in);
            out.replace(i, n, enc);
        }
        i += n;
    }
    return true;
}

}  // namespace di::tok
