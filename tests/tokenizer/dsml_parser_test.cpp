// Output parsing: the events for reference-valid completions (tests/data/tokenizer/dsml_vectors.json, parsed by
// DeepSeek's parse_message_from_completion_text) must match under every way of splitting the text into
// chunks; malformed output must come back as text.
#include <random>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace di {
namespace {

struct Parsed {
    std::string reasoning, content;
    std::vector<std::pair<std::string, std::string>> calls;
};

Parsed collect(const std::vector<ChatEvent>& events, Parsed p = {}) {
    for (const ChatEvent& e : events) {
        if (e.kind == ChatEvent::Kind::kReasoning) p.reasoning += e.text;
        if (e.kind == ChatEvent::Kind::kContent) p.content += e.text;
        if (e.kind == ChatEvent::Kind::kToolCall) p.calls.emplace_back(e.name, e.arguments);
    }
    return p;
}

Parsed parse_in_chunks(const std::string& text, bool thinking, std::mt19937& rng, size_t max_chunk) {
    ChatOutputParser parser(thinking);
    Parsed p;
    size_t i = 0;
    while (i < text.size()) {
        const size_t n = std::min(text.size() - i, 1 + rng() % max_chunk);
        p = collect(parser.push(std::string_view(text).substr(i, n)), std::move(p));
        i += n;
    }
    return collect(parser.finish(), std::move(p));
}

TEST(DsmlParser, MatchesReferenceUnderAnyChunking) {
    const auto vectors = nlohmann::json::parse(test::read_text_file(test::tokenizer_data("dsml_vectors.json")));
    ASSERT_GE(vectors.size(), 8u);
    std::mt19937 rng(7);
    for (const auto& v : vectors) {
        const std::string text = v["text"].get<std::string>();
        std::vector<std::pair<std::string, std::string>> want_calls;
        for (const auto& c : v["tool_calls"]) want_calls.emplace_back(c["name"], c["arguments"]);
        for (size_t max_chunk : {1, 2, 3, 7, 1000000}) {
            for (int rep = 0; rep < (max_chunk == 1000000 ? 1 : 5); ++rep) {
                const Parsed p = parse_in_chunks(text, v["thinking"].get<bool>(), rng, max_chunk);
                EXPECT_EQ(p.reasoning, v["reasoning"].get<std::string>()) << text;
                EXPECT_EQ(p.content, v["content"].get<std::string>()) << text;
                EXPECT_EQ(p.calls, want_calls) << text;
            }
        }
    }
}

TEST(DsmlParser, ToolCallIsEmittedWhenItsInvokeCloses) {
    ChatOutputParser parser(false);
    auto ev = parser.push("ok\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n");
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].text, "ok");
    ev = parser.push("<｜DSML｜parameter name=\"x\" string=\"false\">1</｜DSML｜parameter>\n</｜DSML｜invoke>");
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].kind, ChatEvent::Kind::kToolCall);
    EXPECT_EQ(ev[0].arguments, "{\"x\": 1}");
}

TEST(DsmlParser, MalformedBlocksFallBackToText) {
    const std::vector<std::string> bad = {
        "\n\n<｜DSML｜tool_calls>garbage",
        "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke nam=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"maybe\">1</｜DSML｜parameter>",
        "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">unterminated",
        "<｜DSML｜tool_calls>",
        "text <｜DSML｜invoke name=\"f\"> stray",
    };
    std::mt19937 rng(3);
    for (const std::string& text : bad) {
        for (size_t max_chunk : {1, 5, 1000000}) {
            const Parsed p = parse_in_chunks(text, false, rng, max_chunk);
            EXPECT_TRUE(p.calls.empty()) << text;
            EXPECT_EQ(p.content, text) << "chunk " << max_chunk;
        }
    }
    // A valid call followed by a broken one: the first is kept, the rest is text.
    const std::string mixed =
        "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n<｜DSML｜invoke oops";
    const Parsed p = parse_in_chunks(mixed, false, rng, 4);
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].first, "a");
    EXPECT_EQ(p.content, ">\n<｜DSML｜invoke oops");
}

TEST(DsmlParser, ReasoningWithoutEndAndEosStops) {
    std::mt19937 rng(5);
    Parsed p = parse_in_chunks("still thinking </thi", true, rng, 2);
    EXPECT_EQ(p.reasoning, "still thinking </thi");
    p = parse_in_chunks("r</think>answer<｜end▁of▁sentence｜>ignored", true, rng, 3);
    EXPECT_EQ(p.reasoning, "r");
    EXPECT_EQ(p.content, "answer");
    p = parse_in_chunks("line\n\n", false, rng, 1);
    EXPECT_EQ(p.content, "line\n\n");
}

TEST(DsmlParser, RandomInputNeverBreaksInvariants) {
    // Without markers in the alphabet's reach, all text must come back unchanged, whatever the chunking.
    const std::vector<std::string> atoms = {"<｜DSML｜", "tool_calls>", "invoke", " name=\"", "parameter", "\">", "\n",
                                            "</",       ">",           "x",      "string=\"true\"",   "<think>", "</think>",
                                            "｜",       "<",           "\"",     "/｜DSML｜parameter", "<｜end▁of▁sentence｜>"};
    std::mt19937 rng(11);
    for (int iter = 0; iter < 3000; ++iter) {
        std::string text;
        const int n = 1 + static_cast<int>(rng() % 40);
        for (int k = 0; k < n; ++k) text += atoms[rng() % atoms.size()];
        const bool thinking = rng() % 2;
        const Parsed p = parse_in_chunks(text, thinking, rng, 1 + rng() % 9);
        const Parsed whole = parse_in_chunks(text, thinking, rng, 1000000);
        EXPECT_EQ(p.reasoning, whole.reasoning) << text;
        EXPECT_EQ(p.content, whole.content) << text;
        EXPECT_EQ(p.calls, whole.calls) << text;
    }
}

}  // namespace
}  // namespace di
