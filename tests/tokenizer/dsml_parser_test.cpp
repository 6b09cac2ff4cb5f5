// Output parsing: the events for reference-valid completions (tests/data/tokenizer/dsml_vectors.json, parsed
// by DeepSeek's parse_message_from_completion_text) must match under every way of splitting the text into
// chunks; a call's name comes before its arguments, which stream in pieces; malformed output must come back
// as text (before a call has started) or close the started call with valid JSON.
#include <nlohmann/json.hpp>
#include <random>

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
        if (e.kind == ChatEvent::Kind::kToolCallStart) p.calls.emplace_back(e.name, "");
        if (e.kind == ChatEvent::Kind::kToolCallArguments) {
            EXPECT_FALSE(p.calls.empty()) << "arguments before a call's start";
            if (!p.calls.empty()) p.calls.back().second += e.text;
        }
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
    const auto vectors =
        nlohmann::json::parse(test::read_text_file(test::tokenizer_data("dsml_vectors.json")));
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

// The events of one push, as "kind:text" strings (s = start with its name, a = arguments, c = content).
std::vector<std::string> kinds(const std::vector<ChatEvent>& ev) {
    std::vector<std::string> out;
    for (const ChatEvent& e : ev) {
        switch (e.kind) {
            case ChatEvent::Kind::kToolCallStart:
                out.push_back("s:" + e.name);
                break;
            case ChatEvent::Kind::kToolCallArguments:
                out.push_back("a:" + e.text);
                break;
            case ChatEvent::Kind::kContent:
                out.push_back("c:" + e.text);
                break;
            case ChatEvent::Kind::kReasoning:
                out.push_back("r:" + e.text);
                break;
        }
    }
    return out;
}

TEST(DsmlParser, NameFirstThenArgumentsInPieces) {
    using V = std::vector<std::string>;
    ChatOutputParser parser(false);
    EXPECT_EQ(kinds(parser.push("ok\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n")), V{"c:ok"});
    // The header is complete once the first parameter (or the invoke's end) begins.
    EXPECT_EQ(kinds(parser.push("<｜DSML｜parameter")), (V{"s:f", "a:{"}));
    EXPECT_EQ(kinds(parser.push(" name=\"path\" string=\"true\">a/b")), V{"a:\"path\": \"a/b"});
    // A string value streams as it arrives, escaped; a "<" that may end it waits.
    EXPECT_EQ(kinds(parser.push("\"c\"\nd <")), V{"a:\\\"c\\\"\\nd "});
    EXPECT_EQ(kinds(parser.push(" e<")), V{"a:< e"});
    EXPECT_EQ(kinds(parser.push("/｜DSML｜parameter>\n")), V{"a:\""});
    // Any other value goes out whole when its parameter closes.
    EXPECT_EQ(kinds(parser.push("<｜DSML｜parameter name=\"n\" string=\"false\">1")), V{});
    EXPECT_EQ(kinds(parser.push("2</｜DSML｜parameter>\n</｜DSML｜invoke>")), V{"a:, \"n\": 12}"});
    EXPECT_EQ(kinds(parser.push("\n<｜DSML｜invoke name=\"g\">\n</｜DSML｜invoke>")), (V{"s:g", "a:{}"}));
    EXPECT_EQ(kinds(parser.push("\n</｜DSML｜tool_calls>after")), V{"c:after"});
    EXPECT_EQ(kinds(parser.finish()), V{});
}

TEST(DsmlParser, SplitMultiByteCharactersWaitInStringValues) {
    ChatOutputParser parser(false);
    parser.push(
        "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"t\" "
        "string=\"true\">");
    const std::string euro = "\xe2\x82\xac";  // U+20AC, three bytes
    EXPECT_TRUE(parser.push(euro.substr(0, 2)).empty());
    const auto ev = parser.push(euro.substr(2));
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].text, euro);
}

TEST(DsmlParser, MalformedBlocksFallBackToText) {
    // Before any call has started (no complete invoke header), the whole text comes back.
    const std::vector<std::string> bad = {
        "\n\n<｜DSML｜tool_calls>garbage",
        "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke nam=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n",
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

TEST(DsmlParser, MalformedAfterAStartClosesTheCallWithValidJson) {
    const std::string open = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n";
    const std::string good = "<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>\n";
    struct Case {
        std::string text, args, content;
    };
    const std::vector<Case> cases = {
        // A parameter header that does not parse: the call keeps the parameters before it.
        {open + good + "<｜DSML｜parameter name=\"b\" string=\"maybe\">2</｜DSML｜parameter>", "{\"a\": 1}",
         "<｜DSML｜parameter name=\"b\" string=\"maybe\">2</｜DSML｜parameter>"},
        // Output that ends inside a string value (max_tokens): the value so far, closed.
        {open + "<｜DSML｜parameter name=\"s\" string=\"true\">unterminated \"q",
         "{\"s\": \"unterminated \\\"q\"}", ""},
        // A non-string value never closed: left out; its parameter's text is content.
        {open + good + "<｜DSML｜parameter name=\"n\" string=\"false\">3", "{\"a\": 1}",
         "<｜DSML｜parameter name=\"n\" string=\"false\">3"},
        // A duplicate parameter.
        {open + good + good, "{\"a\": 1}", good},
        // Garbage where ">\n" must follow a parameter.
        {open + "<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>x\n</｜DSML｜invoke>",
         "{\"a\": 1}", ">x\n</｜DSML｜invoke>"},
    };
    std::mt19937 rng(9);
    for (const Case& c : cases) {
        for (size_t max_chunk : {1, 4, 1000000}) {
            const Parsed p = parse_in_chunks(c.text, false, rng, max_chunk);
            ASSERT_EQ(p.calls.size(), 1u) << c.text;
            EXPECT_EQ(p.calls[0].first, "f");
            EXPECT_EQ(p.calls[0].second, c.args) << c.text;
            EXPECT_TRUE(nlohmann::json::accept(p.calls[0].second)) << p.calls[0].second;
            EXPECT_EQ(p.content, c.content) << c.text << " chunk " << max_chunk;
        }
    }
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
    const std::vector<std::string> atoms = {
        "<｜DSML｜", "tool_calls>", "invoke", " name=\"", "parameter",          "\">",
        "\n",        "</",          ">",      "x",        "string=\"true\"",    "<think>",
        "</think>",  "｜",          "<",      "\"",       "/｜DSML｜parameter", "<｜end▁of▁sentence｜>"};
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
