// UTF-8 replacement follows the maximal-subpart rule (expected strings from Python 3.11:
// bytes.decode("utf-8", errors="replace")).
#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace di::tok {
namespace {

const std::string R = "\xEF\xBF\xBD";

TEST(Utf8, SanitizeMatchesPython) {
    EXPECT_EQ(utf8_sanitize("abc"), "abc");
    EXPECT_EQ(utf8_sanitize("\xff"), R);
    EXPECT_EQ(utf8_sanitize("\xc0\xaf"), R + R);                  // overlong: C0 never starts a sequence
    EXPECT_EQ(utf8_sanitize("\xe2\x82"), R);                      // truncated 3-byte: one replacement
    EXPECT_EQ(utf8_sanitize("\xe0\x80\xaf"), R + R + R);          // E0 needs A0..BF next
    EXPECT_EQ(utf8_sanitize("\xed\xa0\x80"), R + R + R);          // surrogate
    EXPECT_EQ(utf8_sanitize("\xf4\x90\x80\x80"), R + R + R + R);  // > U+10FFFF
    EXPECT_EQ(utf8_sanitize("\xf0\x9f\x98"), R);                  // truncated 4-byte
    EXPECT_EQ(utf8_sanitize("\xf0\x9f\x98 x"), R + " x");
    EXPECT_EQ(utf8_sanitize("caf\xe9"), "caf" + R);
}

TEST(Utf8, CompletePrefix) {
    EXPECT_EQ(utf8_complete_prefix("ab"), 2u);
    EXPECT_EQ(utf8_complete_prefix("a\xe2\x82"), 1u);
    EXPECT_EQ(utf8_complete_prefix("a\xe2\x82\xac"), 4u);
    EXPECT_EQ(utf8_complete_prefix("a\xf0\x9f"), 1u);
    EXPECT_EQ(utf8_complete_prefix("a\xff"), 2u);      // invalid now, never completes: emit
    EXPECT_EQ(utf8_complete_prefix("a\xe0\x80"), 3u);  // E0 80 can never become valid
}

}  // namespace
}  // namespace di::tok
