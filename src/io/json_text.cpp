// JSON parsing with errors as values (nlohmann throws; nothing escapes this file).
#include "io/json_text.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace di::io {

int json_nesting_depth(std::string_view text, int limit) {
    int depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (const char c : text) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
            if (deepest > limit) return deepest;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

Status check_json_depth(std::string_view text, const std::string& source) {
    if (json_nesting_depth(text) > kMaxJsonDepth)
        return make_error(ErrorCode::kFormat, "{}: JSON nested deeper than {} levels", source, kMaxJsonDepth);
    return ok_status();
}

Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& source,
                                       std::vector<std::string>* duplicate_key) {
    using nlohmann::json;
    DI_TRY_STATUS(check_json_depth(text, source));
    // One entry per open container: the keys seen so far (objects) and the key being parsed.
    struct Level {
        bool object = false;
        std::unordered_set<std::string> keys;
        std::string key;
    };
    std::vector<Level> open;
    bool have_dup = false;
    json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
        switch (event) {
            case json::parse_event_t::object_start:
                open.push_back(Level{true, {}, {}});
                break;
            case json::parse_event_t::array_start:
                open.push_back(Level{false, {}, {}});
                break;
            case json::parse_event_t::object_end:
            case json::parse_event_t::array_end:
                if (!open.empty()) open.pop_back();
                break;
            case json::parse_event_t::key:
                if (!open.empty() && !have_dup) {
                    Level& top = open.back();
                    top.key = parsed.get<std::string>();
                    if (!top.keys.insert(top.key).second) {
                        have_dup = true;
                        duplicate_key->clear();
                        for (const Level& l : open)
                            if (l.object) duplicate_key->push_back(l.key);
                    }
                }
                break;
            default:
                break;
        }
        return true;
    };
    try {
        json j = json::parse(text.begin(), text.end(), duplicate_key ? cb : nullptr);
        return j;
    } catch (const json::exception& e) {
        std::string msg = e.what();
        // "[json.exception.parse_error.101] parse error at ..." -> keep the human part.
        if (const auto pos = msg.find("] "); pos != std::string::npos) msg = msg.substr(pos + 2);
        for (char& c : msg)
            if (c == '\n' || c == '\r') c = ' ';
        return make_error(ErrorCode::kFormat, "{}: invalid JSON: {}", source, msg);
    }
}

std::string describe_json(const nlohmann::json& v) {
    std::string dumped = v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    if (dumped.size() > 60) dumped = dumped.substr(0, 57) + "...";
    switch (v.type()) {
        case nlohmann::json::value_t::null:
            return "null";
        case nlohmann::json::value_t::boolean:
            return "boolean " + dumped;
        case nlohmann::json::value_t::number_integer:
        case nlohmann::json::value_t::number_unsigned:
            return "integer " + dumped;
        case nlohmann::json::value_t::number_float:
            return "float " + dumped;
        case nlohmann::json::value_t::string:
            return "string " + dumped;
        case nlohmann::json::value_t::array:
            return "array " + dumped;
        case nlohmann::json::value_t::object:
            return "object " + dumped;
        default:
            return dumped;
    }
}

std::string quoted(std::string_view text) {
    std::string out = "'";
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '\n')
            out += "\\n";
        else if (c == '\\' || c == '\'')
            out += std::string("\\") + ch;
        else if (c < 0x20 || c >= 0x7f)
            out += fmt::format("\\x{:02x}", c);
        else
            out += ch;
    }
    return out + "'";
}

}  // namespace di::io
