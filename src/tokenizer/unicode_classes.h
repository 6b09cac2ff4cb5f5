// The five code point classes DeepSeek's pre-tokenizer regexes distinguish, with Unicode 16.0 data taken from
// the reference (tools/tokenizer_unicode_groups.py). PCRE2 ships older Unicode tables, so before matching,
// every non-ASCII character is replaced by a long-assigned stand-in of the same class and UTF-8 length:
// offsets stay valid and the regex sees the reference's categories whatever PCRE2's Unicode version.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace di::tok {

enum class CodeClass : uint8_t { kKeep = 0, kNumber, kLetterMark, kPunctSymbol, kSpace, kOther };

CodeClass code_class(uint32_t cp);

// Writes `text` with stand-ins into `out` (same size). Returns false (out untouched) when text is ASCII.
bool map_to_standins(std::string_view text, std::string& out);

}  // namespace di::tok
