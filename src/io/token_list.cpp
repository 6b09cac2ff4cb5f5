#include "io/token_list.h"

#include <cctype>
#include <charconv>
#include <fstream>
#include <sstream>

namespace di::io {
namespace {

Result<int32_t> parse_id(const std::string& s, const std::string& source) {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v > INT32_MAX)
        return make_error(ErrorCode::kInvalidArgument, "{}: '{}' is not a token id", source, s);
    return int32_t(v);
}

}  // namespace

Result<std::vector<int32_t>> parse_token_list(const std::string& text, const std::string& source) {
    std::vector<int32_t> ids;
    std::string cur;
    for (size_t i = 0; i <= text.size(); ++i) {
        const char c = i < text.size() ? text[i] : ',';
        if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
            if (!cur.empty()) {
                DI_TRY(int32_t id, parse_id(cur, source));
                ids.push_back(id);
                cur.clear();
            }
        } else {
            cur += c;
        }
    }
    if (ids.empty()) return make_error(ErrorCode::kInvalidArgument, "{}: no token ids", source);
    return ids;
}

Result<std::vector<int32_t>> read_token_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) return make_error(ErrorCode::kIo, "cannot open token file '{}'", path);
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_token_list(ss.str(), path);
}

}  // namespace di::io
