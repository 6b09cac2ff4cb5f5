// Everything loaded from tokenizer.json + tokenizer_config.json, immutable after load.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pretokenizer.h"

namespace di::tok {

struct TokenizerModel {
    BpeModel bpe;
    PreTokenizer pretokenizer;
    TokenMatcher added_raw;          // added tokens with normalized=false (matched first)
    TokenMatcher added_normalized;   // normalized=true (the normalizer is the identity here)
    std::vector<std::string> text;   // id -> stored spelling
    std::vector<std::string> bytes;  // id -> decoded bytes
    std::vector<uint8_t> special;    // id -> 1 when an added token marked special
    std::unordered_map<std::string, int32_t> added_by_text;
    std::unordered_map<std::string, int32_t> vocab_by_text;
    int32_t bos_id = -1, eos_id = -1;
    bool add_bos = false;
    uint64_t serial = 0;  // unique per loaded model (keys per-thread caches)
};

// Reads tokenizer.json (and tokenizer_config.json beside it, when present). `path`: file or directory.
Result<TokenizerModel> load_tokenizer_model(const std::string& path);

// Parses tokenizer.json text; `source` names it in errors. Used by the loader and the fuzz target.
Result<TokenizerModel> parse_tokenizer_json(std::string_view json_text, const std::string& source);

// Applies tokenizer_config.json text (bos/eos/add_bos_token) to a parsed model.
Status apply_tokenizer_config(TokenizerModel& m, std::string_view json_text, const std::string& source);

}  // namespace di::tok
