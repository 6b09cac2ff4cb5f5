// Paths of the committed tokenizer assets and fixtures, and a shared loaded tokenizer.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "deepinfer/tokenizer.h"

namespace di::test {

inline std::string tokenizer_dir() { return std::string(DI_SOURCE_DIR) + "/assets/tokenizer"; }
inline std::string tokenizer_data(const std::string& name) {
    return std::string(DI_SOURCE_DIR) + "/tests/data/tokenizer/" + name;
}

inline std::string read_text_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Loading parses 6 MB of JSON; share one instance per test binary.
inline const Tokenizer& v4_tokenizer() {
    static const Tokenizer tok = [] {
        auto t = Tokenizer::load(tokenizer_dir());
        if (!t) {
            ADD_FAILURE() << t.error().message;
            std::abort();
        }
        return std::move(t).value();
    }();
    return tok;
}

inline std::string from_hex(const std::string& hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
        out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return out;
}

}  // namespace di::test
