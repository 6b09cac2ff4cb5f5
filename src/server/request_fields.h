// Reading a JSON request body field by field (shared by the OpenAI and Anthropic parsers): each field is
// type- and range-checked with a 400 naming it, and a field nobody read is refused by finish().
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "io/json_text.h"
#include "server/api_error.h"

namespace di::server::request_fields {

using json = nlohmann::json;
using MaybeError = std::optional<ApiError>;

#define DI_API_TRY(expr)                        \
    do {                                        \
        if (MaybeError e_ = (expr)) return *e_; \
    } while (0)

inline std::string type_name(const json& v) {
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_string()) return "string";
    if (v.is_array()) return "array";
    if (v.is_object()) return "object";
    return "null";
}

// obj[key] where it is a string, else "" (nlohmann's value(key, "") throws on a value of another type).
inline std::string string_or_empty(const json& obj, const char* key) {
    const auto it = obj.find(key);
    return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A parser's body run so that an exception (a type check missed: nlohmann throws on a mismatch) is a 400,
// not a 500. Code "unexpected_structure": tests/server/fuzz_openai_request.cpp treats it as a bug to fix.
template <typename F>
auto refuse_exceptions(F&& parse) -> decltype(parse()) {
    try {
        return parse();
    } catch (const nlohmann::json::exception& e) {
        return bad_request(fmt::format("the request has an unexpected structure ({})", e.what()), "",
                           "unexpected_structure");
    }
}

inline ApiError wrong_type(const std::string& key, const char* want, const json& v) {
    return bad_request(fmt::format("'{}' must be {}, got {}", key, want, type_name(v)), key);
}

// A JSON object's fields, read once each; leftover keys are refused by finish().
class Fields {
  public:
    Fields(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

    // Present and non-null field, else nullptr. null means "absent", as OpenAI clients send it.
    const json* get(const std::string& key) {
        seen_.insert(key);
        auto it = obj_.find(key);
        return it == obj_.end() || it->is_null() ? nullptr : &*it;
    }
    MaybeError number(const std::string& key, double lo, double hi, float& out) {
        const json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_number()) return wrong_type(key, "a number", *v);
        const double d = v->get<double>();
        if (!(d >= lo && d <= hi))
            return bad_request(fmt::format("'{}' is {}, expected a value in [{}, {}]", key, d, lo, hi), key);
        out = float(d);
        return std::nullopt;
    }
    MaybeError integer(const std::string& key, int64_t lo, int64_t hi, std::optional<int64_t>& out) {
        const json* v = get(key);
        if (!v) return std::nullopt;
        int64_t i = 0;
        if (v->is_number_integer()) {
            i = v->get<int64_t>();
        } else if (v->is_number_unsigned()) {
            i = v->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(v->get<uint64_t>());
        } else if (v->is_number_float() && std::nearbyint(v->get<double>()) == v->get<double>() &&
                   std::fabs(v->get<double>()) < 9e18) {
            i = int64_t(v->get<double>());
        } else {
            return wrong_type(key, "an integer", *v);
        }
        if (i < lo || i > hi)
            return bad_request(fmt::format("'{}' is {}, expected an integer in [{}, {}]", key, i, lo, hi),
                               key);
        out = i;
        return std::nullopt;
    }
    MaybeError boolean(const std::string& key, bool& out) {
        const json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_boolean()) return wrong_type(key, "a boolean", *v);
        out = v->get<bool>();
        return std::nullopt;
    }
    MaybeError string(const std::string& key, std::string& out) {
        const json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_string()) return wrong_type(key, "a string", *v);
        out = v->get<std::string>();
        return std::nullopt;
    }
    // Accepted but meaningless here (metadata): read and dropped.
    void ignore(const std::string& key) { seen_.insert(key); }
    MaybeError finish() const {
        for (auto it = obj_.begin(); it != obj_.end(); ++it)
            if (!seen_.count(it.key()))
                return bad_request(
                    fmt::format("{}'{}' is not supported by this server", where_, quote_line(it.key(), 100)),
                    quote_line(it.key(), 100), "unsupported_parameter");
        return std::nullopt;
    }

  private:
    const json& obj_;
    std::string where_;
    std::set<std::string> seen_;
};

// The body as a JSON object, or the 400 that refuses it (not JSON, too deeply nested, not an object).
inline ApiResult<json> parse_body(std::string_view body) {
    if (io::json_nesting_depth(body) > io::kMaxJsonDepth)
        return bad_request(
            fmt::format("the request body nests JSON deeper than {} levels", io::kMaxJsonDepth), "",
            "invalid_json");
    json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return bad_request("the request body is not valid JSON", "", "invalid_json");
    if (!j.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_json");
    return j;
}

}  // namespace di::server::request_fields
