// Stop strings across token boundaries and token-level stops, against hand-worked expectations.
#include "runtime/stop_conditions.h"

#include <gtest/gtest.h>

namespace di::runtime {
namespace {

std::string feed(StopStringMatcher& m, const std::vector<std::string>& pieces, bool* stopped = nullptr) {
    std::string out;
    for (const auto& p : pieces) {
        auto o = m.push(p);
        out += o.text;
        if (o.stopped) {
            if (stopped) *stopped = true;
            return out;
        }
    }
    if (stopped) *stopped = false;
    return out + m.finish();
}

TEST(StopStrings, NoStopsPassesEverythingThrough) {
    StopStringMatcher m({});
    EXPECT_EQ(m.push("abc").text, "abc");
    EXPECT_EQ(m.finish(), "");
}

TEST(StopStrings, MatchSplitAcrossPiecesIsCutWithWhatFollows) {
    StopStringMatcher m({"END"});
    bool stopped = false;
    EXPECT_EQ(feed(m, {"hello E", "N", "Dworld"}, &stopped), "hello ");
    EXPECT_TRUE(stopped);
    EXPECT_EQ(m.push("more").text, "");
}

TEST(StopStrings, HoldsBackOnlyAPossiblePrefix) {
    StopStringMatcher m({"END"});
    auto o = m.push("hello EN");
    EXPECT_EQ(o.text, "hello ");  // "EN" might start "END"
    o = m.push("X");
    EXPECT_EQ(o.text, "ENX");  // it did not
    EXPECT_FALSE(o.stopped);
}

TEST(StopStrings, FalseStartThenRealMatch) {
    StopStringMatcher m({"abc"});
    bool stopped = false;
    EXPECT_EQ(feed(m, {"a", "b", "a", "b", "c", "d"}, &stopped), "ab");
    EXPECT_TRUE(stopped);
}

TEST(StopStrings, EarliestOfSeveralWins) {
    StopStringMatcher m({"world", "lo w"});
    auto o = m.push("hello world");
    EXPECT_TRUE(o.stopped);
    EXPECT_EQ(o.text, "hel");
    EXPECT_EQ(o.matched, "lo w");
}

TEST(StopStrings, UnfinishedPrefixIsReturnedAtTheEnd) {
    StopStringMatcher m({"\n\n"});
    bool stopped = true;
    EXPECT_EQ(feed(m, {"line\n"}, &stopped), "line\n");
    EXPECT_FALSE(stopped);
}

TEST(StopStrings, MultiByteCharacters) {
    StopStringMatcher m({"né"});
    bool stopped = false;
    EXPECT_EQ(feed(m, {"bonjour n", "é", "e"}, &stopped), "bonjour ");
    EXPECT_TRUE(stopped);
}

TEST(TokenStops, StopTokenBeforeLength) {
    TokenStopCheck c({7, 9}, 3);
    EXPECT_EQ(c.on_token(1, 1), StopKind::kNone);
    EXPECT_EQ(c.on_token(9, 2), StopKind::kStopToken);
    EXPECT_EQ(c.on_token(2, 3), StopKind::kLength);
    EXPECT_EQ(c.on_token(7, 3), StopKind::kStopToken);
}

}  // namespace
}  // namespace di::runtime
