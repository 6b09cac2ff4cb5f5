// Pre-tokenizer: the tokenizer.json "Split" regex stages (behavior Isolated), applied in order, each to
// every piece the previous stage produced. Regexes run on PCRE2 with JIT, UTF and Unicode properties.
// ref: tokenizers (Rust) pre_tokenizers/split.rs + normalizer.rs split (SplitDelimiterBehavior::Isolated).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace di::tok {

class PreTokenizer {
  public:
    // Each pattern is an Oniguruma regex from tokenizer.json; `\s`/`\S` are rewritten to Oniguruma's
    // Unicode definition (PCRE2's differs for U+180E and U+200B-class code points).
    static Result<PreTokenizer> build(const std::vector<std::string>& patterns);

    // Appends the pieces of `text` (valid UTF-8) to `out`; pieces are views into `text`.
    // Thread-safe: match buffers are thread_local and independent of the pattern.
    void split(std::string_view text, std::vector<std::string_view>& out) const;

    PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;
    ~PreTokenizer();

  private:
    struct Stage;
    std::vector<std::unique_ptr<Stage>> stages_;
};

// Rewrites an Oniguruma pattern for PCRE2 (exposed for tests).
std::string oniguruma_to_pcre2(std::string_view pattern);

}  // namespace di::tok
