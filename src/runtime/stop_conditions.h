// Stop conditions shared by the engine and the CLI: a token limit, stop token ids (EOS unless ignored) and
// stop strings matched on the decoded text across token boundaries. Text that might begin a stop string is
// held back until it is decided; a match and everything after it are dropped (OpenAI semantics).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace di::runtime {

class StopStringMatcher {
  public:
    explicit StopStringMatcher(std::vector<std::string> stops);  // empty strings are ignored

    struct Output {
        std::string text;  // safe to show now
        bool stopped = false;
        std::string matched;  // the stop string that ended the output
    };
    // Feeds new text; after a stop every further push returns nothing.
    Output push(std::string_view text);
    // End of output without a match: the held-back text.
    std::string finish();
    bool stopped() const { return stopped_; }

  private:
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
};

enum class StopKind { kNone, kStopToken, kLength };

// Token-level checks, evaluated after each generated token.
class TokenStopCheck {
  public:
    TokenStopCheck(std::vector<int32_t> stop_ids, int64_t max_new_tokens);
    // `n_generated` counts `id` itself.
    StopKind on_token(int32_t id, int64_t n_generated) const;
    std::span<const int32_t> stop_ids() const { return stop_ids_; }

  private:
    std::vector<int32_t> stop_ids_;
    int64_t max_new_;
};

}  // namespace di::runtime
