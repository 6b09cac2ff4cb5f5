// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it (", " and ": " separators,
// insertion key order, float repr), which DeepSeek's reference encoder uses for tool schemas and
// tool-call arguments.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace di::tok {

// Python repr() of a float: shortest round-trip digits, scientific when exponent < -4 or >= 16.
std::string python_float_repr(double v);

// json.dumps(v, ensure_ascii=False). Integers beyond 64 bits are not representable (nlohmann parses
// them as floats); NaN/Infinity print as Python does.
std::string python_json_dumps(const nlohmann::ordered_json& v);

}  // namespace di::tok
