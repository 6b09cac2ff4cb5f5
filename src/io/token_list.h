// Parsing of token-id lists given on the command line ("5,17,9") or in files (whitespace separated).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace di::io {

Result<std::vector<int32_t>> parse_token_list(const std::string& text, const std::string& source);
Result<std::vector<int32_t>> read_token_file(const std::string& path);

}  // namespace di::io
