// tokenizer.json / tokenizer_config.json loading. Only what DeepSeek's tokenizers use is accepted: an
// identity normalizer, Split(Isolated) regex stages + ByteLevel(use_regex=false), byte-level BPE without
// dropout/unk/byte-fallback, ByteLevel decoder. Anything else is a clear kUnsupported error.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/json_text.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_model.h"

namespace di::tok {

namespace {

using nlohmann::json;

Result<std::string> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return make_error(ErrorCode::kNotFound, "tokenizer: cannot open '{}'", path);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string describe(const json& v) {
    std::string s = v.dump();
    return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

Status check_normalizer(const json& n, const std::string& src) {
    if (n.is_null()) return ok_status();
    if (n.is_object() && n.value("type", "") == "Sequence" && n.contains("normalizers") &&
        n["normalizers"].is_array() && n["normalizers"].empty())
        return ok_status();
    return make_error(ErrorCode::kUnsupported,
                      "{}: normalizer {} is not supported (expected null or an empty Sequence)", src,
                      describe(n));
}

Result<std::vector<std::string>> split_patterns(const json& pt, const std::string& src) {
    std::vector<std::string> patterns;
    if (!pt.is_object() || pt.value("type", "") != "Sequence" || !pt.contains("pretokenizers") ||
        !pt["pretokenizers"].is_array())
        return make_error(ErrorCode::kUnsupported,
                          "{}: pre_tokenizer {} is not supported (expected a Sequence)", src, describe(pt));
    const json& list = pt["pretokenizers"];
    for (size_t i = 0; i < list.size(); ++i) {
        const json& p = list[i];
        const std::string type = p.is_object() ? p.value("type", "") : "";
        if (type == "Split" && p.contains("pattern") && p["pattern"].is_object() &&
            p["pattern"].contains("Regex") && p["pattern"]["Regex"].is_string() &&
            p.value("behavior", "") == "Isolated" && !p.value("invert", false)) {
            patterns.push_back(p["pattern"]["Regex"].get<std::string>());
        } else if (type == "ByteLevel" && i + 1 == list.size() && !p.value("use_regex", true) &&
                   !p.value("add_prefix_space", false)) {
            return patterns;
        } else {
            return make_error(ErrorCode::kUnsupported,
                              "{}: pre_tokenizer.pretokenizers[{}] {} is not supported", src, i, describe(p));
        }
    }
    return make_error(ErrorCode::kUnsupported,
                      "{}: pre_tokenizer does not end with ByteLevel(use_regex=false)", src);
}

Status load_vocab(TokenizerModel& m, const json& model, const std::string& src) {
    if (!model.is_object() || model.value("type", "") != "BPE")
        return make_error(ErrorCode::kUnsupported, "{}: model type {} is not supported (expected BPE)", src,
                          describe(model.is_object() ? model.value("type", json()) : model));
    for (const char* k : {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix"})
        if (model.contains(k) && !model[k].is_null())
            return make_error(ErrorCode::kUnsupported, "{}: model.{} = {} is not supported", src, k,
                              describe(model[k]));
    if (model.value("byte_fallback", false))
        return make_error(ErrorCode::kUnsupported, "{}: model.byte_fallback = true is not supported", src);
    if (!model.contains("vocab") || !model["vocab"].is_object())
        return make_error(ErrorCode::kFormat, "{}: model.vocab is missing or not an object", src);
    if (!model.contains("merges") || !model["merges"].is_array())
        return make_error(ErrorCode::kFormat, "{}: model.merges is missing or not an array", src);

    std::vector<std::pair<std::string, int32_t>> vocab;
    vocab.reserve(model["vocab"].size());
    for (const auto& [text, id] : model["vocab"].items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (int64_t{1} << 24))
            return make_error(ErrorCode::kFormat, "{}: model.vocab['{}'] = {} is not an id in [0, 2^24)", src,
                              text, describe(id));
        vocab.emplace_back(text, id.get<int32_t>());
    }
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(model["merges"].size());
    for (size_t i = 0; i < model["merges"].size(); ++i) {
        const json& mg = model["merges"][i];
        if (mg.is_string()) {
            const std::string s = mg.get<std::string>();
            const size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                return make_error(ErrorCode::kFormat, "{}: model.merges[{}] = '{}' is not 'left right'", src,
                                  i, s);
            merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
            merges.emplace_back(mg[0].get<std::string>(), mg[1].get<std::string>());
        } else {
            return make_error(ErrorCode::kFormat, "{}: model.merges[{}] = {} is not a pair of strings", src,
                              i, describe(mg));
        }
    }
    DI_TRY(m.bpe, BpeModel::build(vocab, merges, model.value("ignore_merges", false)));
    int32_t max_id = -1;
    for (const auto& [text, id] : vocab) max_id = std::max(max_id, id);
    m.text.resize(static_cast<size_t>(max_id) + 1);
    for (auto& [text, id] : vocab) {
        m.vocab_by_text.emplace(text, id);
        m.text[id] = std::move(text);
    }
    return ok_status();
}

Status load_added(TokenizerModel& m, const json& added, const std::string& src) {
    if (added.is_null()) return ok_status();
    if (!added.is_array()) return make_error(ErrorCode::kFormat, "{}: added_tokens is not an array", src);
    for (size_t i = 0; i < added.size(); ++i) {
        const json& a = added[i];
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
            !a["content"].is_string() || a["id"].get<int64_t>() < 0 ||
            a["id"].get<int64_t>() >= (int64_t{1} << 24))
            return make_error(ErrorCode::kFormat,
                              "{}: added_tokens[{}] = {} needs an integer id and string content", src, i,
                              describe(a));
        for (const char* k : {"lstrip", "rstrip", "single_word"})
            if (a.value(k, false))
                return make_error(ErrorCode::kUnsupported, "{}: added_tokens[{}].{} = true is not supported",
                                  src, i, k);
        const auto id = a["id"].get<int32_t>();
        const std::string content = a["content"].get<std::string>();
        if (static_cast<size_t>(id) >= m.text.size()) m.text.resize(static_cast<size_t>(id) + 1);
        m.text[id] = content;
        m.special.resize(m.text.size(), 0);
        m.special[id] = a.value("special", false) ? 1 : 0;
        m.added_by_text[content] = id;
        (a.value("normalized", false) ? m.added_normalized : m.added_raw).add(content, id);
    }
    return ok_status();
}

}  // namespace

namespace {

Result<TokenizerModel> parse_tokenizer_json_impl(std::string_view json_text, const std::string& src) {
    DI_TRY_STATUS(io::check_json_depth(json_text, src));
    json j = json::parse(json_text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        return make_error(ErrorCode::kFormat, "{}: not a JSON object", src);
    TokenizerModel m;
    DI_TRY_STATUS(check_normalizer(j.value("normalizer", json()), src));
    DI_TRY(std::vector<std::string> patterns, split_patterns(j.value("pre_tokenizer", json()), src));
    DI_TRY(m.pretokenizer, PreTokenizer::build(patterns));
    const json decoder = j.value("decoder", json());
    if (!decoder.is_object() || decoder.value("type", "") != "ByteLevel")
        return make_error(ErrorCode::kUnsupported, "{}: decoder {} is not supported (expected ByteLevel)",
                          src, describe(decoder));
    const json post = j.value("post_processor", json());
    if (!post.is_null() && (!post.is_object() || post.value("type", "") != "ByteLevel"))
        return make_error(ErrorCode::kUnsupported,
                          "{}: post_processor {} is not supported (expected ByteLevel or null)", src,
                          describe(post));
    DI_TRY_STATUS(load_vocab(m, j.value("model", json()), src));
    DI_TRY_STATUS(load_added(m, j.value("added_tokens", json()), src));
    static std::atomic<uint64_t> next_serial{1};
    m.serial = next_serial++;
    m.special.resize(m.text.size(), 0);
    m.bytes.resize(m.text.size());
    for (size_t id = 0; id < m.text.size(); ++id) m.bytes[id] = byte_level_decode_token(m.text[id]);
    // Without a config, fall back to DeepSeek's names when the vocabulary has them.
    if (auto it = m.added_by_text.find("<｜begin▁of▁sentence｜>"); it != m.added_by_text.end())
        m.bos_id = it->second;
    if (auto it = m.added_by_text.find("<｜end▁of▁sentence｜>"); it != m.added_by_text.end())
        m.eos_id = it->second;
    return m;
}

Status apply_tokenizer_config_impl(TokenizerModel& m, std::string_view json_text, const std::string& src) {
    DI_TRY_STATUS(io::check_json_depth(json_text, src));
    json j = json::parse(json_text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        return make_error(ErrorCode::kFormat, "{}: not a JSON object", src);
    auto token_of = [&](const char* key, int32_t& out) -> Status {
        if (!j.contains(key) || j[key].is_null()) return ok_status();
        const json& t = j[key];
        std::string content;
        if (t.is_string())
            content = t.get<std::string>();
        else if (t.is_object() && t.contains("content") && t["content"].is_string())
            content = t["content"].get<std::string>();
        else
            return make_error(ErrorCode::kFormat, "{}: {} = {} is neither a string nor an AddedToken", src,
                              key, describe(t));
        if (auto it = m.added_by_text.find(content); it != m.added_by_text.end()) {
            out = it->second;
        } else if (auto v = m.vocab_by_text.find(content); v != m.vocab_by_text.end()) {
            out = v->second;
        } else {
            return make_error(ErrorCode::kFormat, "{}: {} '{}' is not a token of tokenizer.json", src, key,
                              content);
        }
        return ok_status();
    };
    DI_TRY_STATUS(token_of("bos_token", m.bos_id));
    DI_TRY_STATUS(token_of("eos_token", m.eos_id));
    if (j.contains("add_bos_token")) {
        if (!j["add_bos_token"].is_boolean())
            return make_error(ErrorCode::kFormat, "{}: add_bos_token = {} is not a boolean", src,
                              describe(j["add_bos_token"]));
        m.add_bos = j["add_bos_token"].get<bool>();
    }
    return ok_status();
}

}  // namespace

// nlohmann throws on type mismatches deep inside (e.g. a non-string "type"); they become format errors.
Result<TokenizerModel> parse_tokenizer_json(std::string_view json_text, const std::string& src) {
    try {
        return parse_tokenizer_json_impl(json_text, src);
    } catch (const nlohmann::json::exception& e) {
        return make_error(ErrorCode::kFormat, "{}: unexpected JSON structure: {}", src, e.what());
    }
}

Status apply_tokenizer_config(TokenizerModel& m, std::string_view json_text, const std::string& src) {
    try {
        return apply_tokenizer_config_impl(m, json_text, src);
    } catch (const nlohmann::json::exception& e) {
        return make_error(ErrorCode::kFormat, "{}: unexpected JSON structure: {}", src, e.what());
    }
}

Result<TokenizerModel> load_tokenizer_model(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path file = path;
    if (fs::is_directory(file, ec)) file /= "tokenizer.json";
    if (!fs::is_regular_file(file, ec))
        return make_error(ErrorCode::kNotFound,
                          "tokenizer: '{}' is not a tokenizer.json file or a directory holding one", path);
    DI_TRY(std::string text, read_file(file.string()));
    DI_TRY(TokenizerModel m, parse_tokenizer_json(text, file.string()));
    const fs::path config = file.parent_path() / "tokenizer_config.json";
    if (fs::is_regular_file(config, ec)) {
        DI_TRY(std::string ctext, read_file(config.string()));
        DI_TRY_STATUS(apply_tokenizer_config(m, ctext, config.string()));
    }
    return m;
}

}  // namespace di::tok
