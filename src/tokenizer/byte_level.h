// GPT-2 byte-level alphabet: every byte maps to one printable code point so BPE vocabularies can be
// stored as text. ref: tokenizers (Rust) pre_tokenizers/byte_level.rs bytes_char().
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace di::tok {

// Code point that byte b is written as in the vocabulary.
uint32_t byte_to_codepoint(uint8_t b);

// Inverse map: bytes of a vocabulary string when every char is in the alphabet, else nullopt.
std::optional<std::string> byte_level_to_bytes(std::string_view token);

// ByteLevel decoder rule for one token: its bytes, or its own UTF-8 when it is not byte-level text
// (how tokenizers' ByteLevel::decode_chain treats tokens like "<｜User｜>").
std::string byte_level_decode_token(std::string_view token);

}  // namespace di::tok
