// UTF-8 helpers shared by the tokenizer: validation with the "maximal subpart" replacement rule (the one
// Python's bytes.decode(errors="replace") and Rust's String::from_utf8_lossy use), and the boundary test the
// streaming decoder needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace di::tok {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence starting at s[0], or 0 when s[0] does not start one. When the
// sequence is invalid, *bad_len receives the length of its maximal subpart (>= 1), which is what one
// U+FFFD replaces. When the bytes run out mid-sequence, *truncated is set (and bad_len is the prefix).
size_t utf8_sequence(std::string_view s, size_t* bad_len, bool* truncated = nullptr);

// True when `s` is entirely valid UTF-8.
bool utf8_valid(std::string_view s);
// Offset of the first byte that does not start a valid UTF-8 sequence, or npos when `s` is valid.
size_t utf8_first_invalid(std::string_view s);

// Copy of `s` with each maximal invalid subpart replaced by U+FFFD.
std::string utf8_sanitize(std::string_view s);

// Number of leading bytes of `s` that can be emitted now: everything except a trailing incomplete
// sequence that further bytes could still complete.
size_t utf8_complete_prefix(std::string_view s);

// Appends code point `cp` (must be a valid scalar value) as UTF-8.
void utf8_append(std::string& out, uint32_t cp);

}  // namespace di::tok
