// JSON parsing with errors as values (nlohmann throws; nothing escapes this file).
#include "io/json_text.h"

#include <unordered_set>

namespace di::io {

Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& source,
                                       std::string* duplicate_top_key) {
    using nlohmann::json;
    std::unordered_set<std::string> top_keys;
    bool have_dup = false;
    json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
        if (duplicate_top_key != nullptr && !have_dup && depth == 1 && event == json::parse_event_t::key) {
            std::string key = parsed.get<std::string>();
            if (!top_keys.insert(key).second) {
                have_dup = true;
                *duplicate_top_key = std::move(key);
            }
        }
        return true;
    };
    try {
        json j = json::parse(text.begin(), text.end(), duplicate_top_key ? cb : nullptr);
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
