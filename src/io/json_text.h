// JSON text -> nlohmann::json as a Result: a parse error becomes a one-line message naming the source.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/error.h"

namespace di::io {

// Parses `text`; errors read "<source>: invalid JSON: <parser message>". When `duplicate_top_key` is given,
// the first key that occurs twice in the top-level object is stored there (the parse itself keeps the last).
Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& source,
                                       std::string* duplicate_top_key = nullptr);

// Short description of a JSON value's type and value for error messages: "integer 5", "string \"x\"".
std::string describe_json(const nlohmann::json& v);

// 'text' in single quotes with control and non-ASCII bytes escaped (\n, \x1f), so a name taken from a file
// keeps an error message on one line.
std::string quoted(std::string_view text);

}  // namespace di::io
