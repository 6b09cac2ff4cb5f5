// Streaming detokenization: pieces are always complete UTF-8 and concatenate to decode().
#include <nlohmann/json.hpp>
#include <random>

#include "test_paths.h"
#include "tokenizer/utf8.h"

namespace di {
namespace {

TEST(StreamDecoder, PiecesAreValidAndConcatenateToDecode) {
    const Tokenizer& tok = test::v4_tokenizer();
    std::istringstream lines(test::read_text_file(test::tokenizer_data("corpus.jsonl")));
    std::string line;
    size_t n = 0;
    while (std::getline(lines, line)) {
        const auto ids = nlohmann::json::parse(line)["ids"].get<std::vector<int32_t>>();
        StreamDecoder dec(tok);
        std::string all;
        for (int32_t id : ids) {
            const std::string piece = dec.push(id).value();
            ASSERT_TRUE(tok::utf8_valid(piece));
            all += piece;
        }
        all += dec.finish();
        ASSERT_EQ(all, tok.decode(ids).value()) << line.substr(0, 100);
        ++n;
    }
    EXPECT_GT(n, 2000u);
}

TEST(StreamDecoder, HoldsBackPartialCharacters) {
    const Tokenizer& tok = test::v4_tokenizer();
    // Random id sequences split characters anywhere, including invalid byte combinations.
    std::mt19937 rng(1);
    for (int iter = 0; iter < 300; ++iter) {
        std::vector<int32_t> ids(1 + rng() % 30);
        for (auto& id : ids) id = static_cast<int32_t>(rng() % 128000);
        StreamDecoder dec(tok);
        std::string all;
        for (int32_t id : ids) {
            const std::string piece = dec.push(id).value();
            ASSERT_TRUE(tok::utf8_valid(piece));
            all += piece;
        }
        all += dec.finish();
        EXPECT_EQ(all, tok.decode(ids).value());
    }
    StreamDecoder dec(tok);
    EXPECT_FALSE(dec.push(-1).ok());
    EXPECT_FALSE(dec.push(tok.vocab_size()).ok());
}

TEST(StreamDecoder, EmojiArrivesWhole) {
    const Tokenizer& tok = test::v4_tokenizer();
    const auto ids = tok.encode("😀");
    ASSERT_GT(ids.size(), 1u);  // byte-level pieces of one character
    StreamDecoder dec(tok);
    std::string got;
    for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(dec.push(ids[i]).value(), "");
    EXPECT_EQ(dec.push(ids.back()).value(), "😀");
    EXPECT_EQ(dec.finish(), "");
}

TEST(StreamDecoder, SkipSpecial) {
    const Tokenizer& tok = test::v4_tokenizer();
    StreamDecoder dec(tok, true);
    EXPECT_EQ(dec.push(tok.eos_id()).value(), "");
}

}  // namespace
}  // namespace di
