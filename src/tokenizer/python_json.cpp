// Python-compatible JSON serialisation. ref: CPython Lib/json/encoder.py (py_encode_basestring,
// floatstr) and Python/pystrtod.c (repr 'r' mode: fixed notation when -4 <= exponent < 16).
#include "tokenizer/python_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace di::tok {

std::string python_float_repr(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    char buf[64];
    auto res =
        std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);  // shortest round-trip
    std::string s(buf, res.ptr);
    std::string sign;
    if (s[0] == '-') {
        sign = "-";
        s.erase(0, 1);
    }
    const size_t e = s.find('e');
    std::string digits = s.substr(0, e);
    const int exp10 = std::stoi(s.substr(e + 1));
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    const int decpt = exp10 + 1;  // value = 0.digits * 10^decpt
    std::string out;
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
        } else if (static_cast<size_t>(decpt) >= digits.size()) {
            out = digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
        } else {
            out = digits.substr(0, static_cast<size_t>(decpt)) + "." +
                  digits.substr(static_cast<size_t>(decpt));
        }
    } else {
        out = digits.substr(0, 1);
        if (digits.size() > 1)
            out.append(".").append(digits, 1);  // append: GCC 12 -Wrestrict false positive on "." + s
        const int x = decpt - 1;
        char eb[16];
        std::snprintf(eb, sizeof(eb), "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
        out += eb;
    }
    return sign + out;
}

namespace {

void dump_string(const std::string& s, std::string& out) {
    out.push_back('"');
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                    out += buf;
                } else {
                    out.push_back(ch);
                }
        }
    }
    out.push_back('"');
}

void dump(const nlohmann::ordered_json& v, std::string& out) {
    switch (v.type()) {
        case nlohmann::json::value_t::null:
            out += "null";
            break;
        case nlohmann::json::value_t::boolean:
            out += v.get<bool>() ? "true" : "false";
            break;
        case nlohmann::json::value_t::number_integer:
            out += std::to_string(v.get<int64_t>());
            break;
        case nlohmann::json::value_t::number_unsigned:
            out += std::to_string(v.get<uint64_t>());
            break;
        case nlohmann::json::value_t::number_float:
            out += python_float_repr(v.get<double>());
            break;
        case nlohmann::json::value_t::string:
            dump_string(v.get_ref<const std::string&>(), out);
            break;
        case nlohmann::json::value_t::array: {
            out.push_back('[');
            bool first = true;
            for (const auto& x : v) {
                if (!first) out += ", ";
                first = false;
                dump(x, out);
            }
            out.push_back(']');
            break;
        }
        case nlohmann::json::value_t::object: {
            out.push_back('{');
            bool first = true;
            for (const auto& [k, x] : v.items()) {
                if (!first) out += ", ";
                first = false;
                dump_string(k, out);
                out += ": ";
                dump(x, out);
            }
            out.push_back('}');
            break;
        }
        default:
            out += "null";
            break;  // binary / discarded never come from a text parse
    }
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& v) {
    std::string out;
    dump(v, out);
    return out;
}

}  // namespace di::tok
