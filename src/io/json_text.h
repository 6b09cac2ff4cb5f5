// JSON text -> nlohmann::json as a Result: a parse error becomes a one-line message naming the source.
// Every JSON the engine reads from outside (requests, tool schemas and arguments, config.json, safetensors
// headers, tokenizer.json) passes check_json_depth first: nothing recursive runs on unbounded nesting.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/error.h"

namespace di::io {

// Deepest nesting of arrays/objects any input may have. The engine's own files nest at most 6 levels and
// real tool schemas a few dozen; 128 keeps every recursive walk (serialisation, destruction) far from the
// stack limit.
inline constexpr int kMaxJsonDepth = 128;

// Deepest array/object nesting in `text` (brackets inside strings are skipped). Linear, no recursion, and
// stops counting once `limit` is passed (returns limit + 1 then).
int json_nesting_depth(std::string_view text, int limit = kMaxJsonDepth);

// kFormat "<source>: JSON nested deeper than 128 levels" when the text exceeds kMaxJsonDepth.
Status check_json_depth(std::string_view text, const std::string& source);

// Parses `text` (after check_json_depth); errors read "<source>: invalid JSON: <parser message>".
// When `duplicate_key` is given, the path of the first key that occurs twice inside one object is stored
// there as its chain of keys from the top ({"t", "dtype"}: key "dtype" twice inside "t"); the parse itself
// keeps the last occurrence.
Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& source,
                                       std::vector<std::string>* duplicate_key = nullptr);

// Short description of a JSON value's type and value for error messages: "integer 5", "string \"x\"".
std::string describe_json(const nlohmann::json& v);

// 'text' in single quotes with control and non-ASCII bytes escaped (\n, \x1f), so a name taken from a file
// keeps an error message on one line.
std::string quoted(std::string_view text);

}  // namespace di::io
