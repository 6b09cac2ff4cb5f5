// `deepinfer tokenize` (text -> JSON array of ids or token strings) and `deepinfer detokenize` (ids -> text).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "deepinfer/tokenizer.h"

namespace di::cli {

namespace {

struct TokenizeArgs {
    std::string tokenizer, text, text_file, output = "ids";
    bool bos = false, no_bos = false, split_special = false;
};

int run_tokenize(const TokenizeArgs& a) {
    auto tok = Tokenizer::load(a.tokenizer);
    if (!tok) return fail(tok.error().message);
    std::string text = a.text;
    if (!a.text_file.empty()) {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(a.text_file, ec))
            return fail("tokenize: --text-file '" + a.text_file + "' is not a regular file");
        std::ifstream f(a.text_file, std::ios::binary);
        if (!f) return fail("tokenize: cannot open --text-file '" + a.text_file + "'");
        std::ostringstream ss;
        ss << f.rdbuf();
        if (!f && !f.eof()) return fail("tokenize: cannot read --text-file '" + a.text_file + "'");
        text = ss.str();
    }
    // Refused rather than replaced: Hugging Face tokenizers only encode valid strings, so no reference ids
    // exist for other bytes, and a silent U+FFFD would change the text.
    if (auto bad = Tokenizer::invalid_utf8_offset(text))
        return fail(fmt::format("tokenize: {} is not valid UTF-8 at byte {} (0x{:02x})",
                                a.text_file.empty() ? std::string("--text") : "'" + a.text_file + "'", *bad,
                                static_cast<unsigned char>(text[*bad])));
    const bool add_bos = a.bos ? true : a.no_bos ? false : tok->add_bos();
    const Tokenizer::TextRange whole{0, text.size()};
    const std::vector<int32_t> ids =
        a.split_special ? tok->encode(text, add_bos, std::span(&whole, 1)) : tok->encode(text, add_bos);
    nlohmann::json out = nlohmann::json::array();
    for (int32_t id : ids) {
        if (a.output == "tokens")
            out.push_back(std::string(tok->token_text(id)));
        else
            out.push_back(id);
    }
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
}

// Accepts "[1, 2, 3]" or "1,2,3" / "1 2 3".
Result<std::vector<int32_t>> parse_ids(const std::string& s) {
    std::vector<int32_t> ids;
    std::string token;
    auto flush = [&]() -> Status {
        if (token.empty()) return ok_status();
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(token, &used);
        } catch (...) {
            used = 0;
        }
        if (used != token.size() || v < INT32_MIN || v > INT32_MAX)
            return make_error(ErrorCode::kInvalidArgument,
                              "detokenize: --tokens has '{}', expected an integer id", token);
        ids.push_back(static_cast<int32_t>(v));
        token.clear();
        return ok_status();
    };
    for (char c : s) {
        if (c == '[' || c == ']' || c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            DI_TRY_STATUS(flush());
        } else {
            token.push_back(c);
        }
    }
    DI_TRY_STATUS(flush());
    return ids;
}

std::function<int()> setup_tokenize(CLI::App& sub) {
    auto a = std::make_shared<TokenizeArgs>();
    sub.add_option("--tokenizer", a->tokenizer, "tokenizer.json or a directory holding it")->required();
    auto* text = sub.add_option("--text", a->text, "text to encode");
    auto* file = sub.add_option("--text-file", a->text_file, "file whose bytes are encoded");
    text->excludes(file);
    file->excludes(text);
    sub.add_option("--output", a->output, "ids (default) or tokens")->check(CLI::IsMember({"ids", "tokens"}));
    sub.add_flag("--bos", a->bos, "prepend BOS (default: tokenizer_config.json add_bos_token)");
    sub.add_flag("--no-bos", a->no_bos, "never prepend BOS");
    sub.add_flag("--split-special-tokens", a->split_special,
                 "encode special-token text as ordinary text (default: it becomes the special token)");
    return [a, text, file]() -> int {
        if (text->count() == 0 && file->count() == 0) return fail("tokenize: give --text or --text-file");
        return run_tokenize(*a);
    };
}

std::function<int()> setup_detokenize(CLI::App& sub) {
    auto path = std::make_shared<std::string>();
    auto ids_text = std::make_shared<std::string>();
    auto skip = std::make_shared<bool>(false);
    sub.add_option("--tokenizer", *path, "tokenizer.json or a directory holding it")->required();
    sub.add_option("--tokens", *ids_text, "ids: JSON array or comma-separated")->required();
    sub.add_flag("--skip-special", *skip, "leave special tokens out");
    return [path, ids_text, skip]() -> int {
        auto tok = Tokenizer::load(*path);
        if (!tok) return fail(tok.error().message);
        auto ids = parse_ids(*ids_text);
        if (!ids) return fail(ids.error().message);
        auto text = tok->decode(ids.value(), *skip);
        if (!text) return fail(text.error().message);
        std::fwrite(text->data(), 1, text->size(), stdout);
        std::fputc('\n', stdout);
        return 0;
    };
}

}  // namespace

DI_COMMAND("tokenize", "Encode text with a tokenizer.json; prints a JSON array of ids", setup_tokenize);
DI_COMMAND("detokenize", "Decode token ids with a tokenizer.json; prints the text", setup_detokenize);

}  // namespace di::cli
