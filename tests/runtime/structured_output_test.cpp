// Structured output through the engine on the tiny fp32 fixture (random weights, byte tokenizer): whatever
// the model's logits say, a json_schema request's text parses and satisfies the schema, checked here by
// hand with nlohmann::json (not by the grammar engine that produced it); without the constraint the same
// requests do not produce JSON. Bad schemas are refused at submit, naming response_format.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "deepinfer/engine.h"
#include "deepinfer/tokenizer.h"

namespace di {
namespace {

const std::string kModel = std::string(DI_TEST_DATA) + "/v4_tiny_fp32";
const std::string kTokenizer = std::string(DI_SOURCE_DIR) + "/tests/e2e/data/tiny_tokenizer";

// limits.worker "": grammars compile in the test's process; else in that helper process, as the server runs.
std::unique_ptr<Engine> make_engine(const std::string& worker = "",
                                    std::chrono::milliseconds timeout = std::chrono::milliseconds(20000),
                                    int64_t memory = int64_t(4) << 30) {
    EngineOptions o;
    o.model_dir = kModel;
    o.tokenizer_path = kTokenizer;
    o.max_running = 16;
    o.state_memory_bytes = int64_t(1) << 30;
    o.grammar_worker = worker;
    o.grammar_timeout = timeout;
    o.grammar_memory_bytes = memory;
    auto e = Engine::create(o);
    EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().message);
    return e.ok() ? std::move(*e) : nullptr;
}

struct Output {
    std::string text;
    FinishReason reason = FinishReason::kNone;
    std::string error;
};

Output run(Engine& e, Request r) {
    auto s = e.submit(std::move(r));
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    Output o;
    if (!s.ok()) return o;
    for (;;) {
        auto ev = (*s)->next(std::chrono::milliseconds(120000));
        if (!ev) {
            ADD_FAILURE() << "no event for 120 s";
            return o;
        }
        o.text += ev->text;
        if (ev->finished) {
            o.reason = ev->reason;
            o.error = ev->error;
            return o;
        }
    }
}

Request sampled(uint64_t seed, int64_t max_tokens) {
    Request r;
    r.prompt = {72, 101, 108, 108, 111, 58, 32};  // "Hello: "
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.stop.max_tokens = max_tokens;
    return r;
}

// The same request held to a constraint: `spec` is the JSON schema or the structural tag its kind needs.
Request constrained(uint64_t seed, int64_t max_tokens, OutputConstraint::Kind kind,
                    const std::string& spec = "") {
    Request r = sampled(seed, max_tokens);
    r.constraint.kind = kind;
    if (kind == OutputConstraint::Kind::kJsonSchema) r.constraint.json_schema = spec;
    if (kind == OutputConstraint::Kind::kStructuralTag) r.constraint.structural_tag = spec;
    return r;
}

constexpr const char* kSchema = R"({
  "type": "object",
  "properties": {
    "answer": {"type": "string", "enum": ["yes", "no", "maybe"]},
    "score": {"type": "integer", "minimum": 0, "maximum": 9},
    "ok": {"type": "boolean"}
  },
  "required": ["answer", "score", "ok"],
  "additionalProperties": false
})";

// The schema above, checked without the grammar engine.
::testing::AssertionResult satisfies_schema(const std::string& text) {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded()) return ::testing::AssertionFailure() << "not JSON: " << text;
    if (!j.is_object() || j.size() != 3)
        return ::testing::AssertionFailure() << "not an object of 3 keys: " << text;
    const std::set<std::string> answers = {"yes", "no", "maybe"};
    if (!j.contains("answer") || !j["answer"].is_string() || !answers.count(j["answer"].get<std::string>()))
        return ::testing::AssertionFailure() << "answer: " << text;
    if (!j.contains("score") || !j["score"].is_number_integer() || j["score"].get<int64_t>() < 0 ||
        j["score"].get<int64_t>() > 9)
        return ::testing::AssertionFailure() << "score: " << text;
    if (!j.contains("ok") || !j["ok"].is_boolean()) return ::testing::AssertionFailure() << "ok: " << text;
    return ::testing::AssertionSuccess();
}

// JSON allows numbers no double holds (1e999), which nlohmann refuses: each number literal outside strings
// is checked against JSON's number syntax and replaced by 0 before the parse.
nlohmann::json parse_any_numbers(const std::string& text) {
    static const std::regex number(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
    std::string out;
    bool in_string = false;
    for (size_t i = 0; i < text.size();) {
        const char c = text[i];
        if (in_string) {
            out += c;
            if (c == '\\' && i + 1 < text.size())
                out += text[++i];
            else if (c == '"')
                in_string = false;
            ++i;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t e = i;
            while (e < text.size() && std::strchr("+-.eE0123456789", text[e])) ++e;
            if (!std::regex_match(text.substr(i, e - i), number)) return nlohmann::json::value_t::discarded;
            out += '0';
            i = e;
        } else {
            in_string = c == '"';
            out += c;
            ++i;
        }
    }
    return nlohmann::json::parse(out, nullptr, false);
}

TEST(StructuredOutput, JsonSchemaOutputsSatisfyTheSchemaWhateverTheSeed) {
    auto e = make_engine();
    ASSERT_TRUE(e);
    int unconstrained_json = 0;
    for (uint64_t seed = 0; seed < 12; ++seed) {
        const Output o = run(*e, constrained(seed, 120, OutputConstraint::Kind::kJsonSchema, kSchema));
        EXPECT_EQ(o.reason, FinishReason::kStop) << "seed " << seed << ": " << o.text << " " << o.error;
        EXPECT_TRUE(satisfies_schema(o.text)) << "seed " << seed;
        const Output free = run(*e, sampled(seed, 40));  // the same request without the constraint
        unconstrained_json += nlohmann::json::accept(free.text) ? 1 : 0;
    }
    EXPECT_EQ(unconstrained_json, 0)
        << "the random model writes JSON by itself: this test would prove nothing";
}

TEST(StructuredOutput, JsonObjectOutputsAreObjects) {
    auto e = make_engine();
    ASSERT_TRUE(e);
    int complete = 0;
    for (uint64_t seed = 0; seed < 8; ++seed) {
        const Output o = run(*e, constrained(seed, 400, OutputConstraint::Kind::kJsonObject));
        ASSERT_NE(o.reason, FinishReason::kError) << o.error;
        EXPECT_EQ(o.text.rfind("{", 0), 0u) << "seed " << seed << ": " << o.text;
        if (o.reason != FinishReason::kStop) continue;  // cut by max_tokens: a prefix of an object
        ++complete;
        const auto j = parse_any_numbers(o.text);
        EXPECT_TRUE(!j.is_discarded() && j.is_object()) << "seed " << seed << ": " << o.text;
    }
    EXPECT_GT(complete, 0) << "no request finished its object within 400 tokens";
}

TEST(StructuredOutput, GreedyConstrainedOutputIsDeterministic) {
    auto e = make_engine();
    ASSERT_TRUE(e);
    Request r = constrained(0, 120, OutputConstraint::Kind::kJsonSchema, kSchema);
    r.sampling.temperature = 0;
    const Output a = run(*e, r), b = run(*e, r);
    EXPECT_TRUE(satisfies_schema(a.text));
    EXPECT_EQ(a.text, b.text);
}

TEST(StructuredOutput, BadSchemasAreRefusedNamingResponseFormat) {
    auto e = make_engine();
    ASSERT_TRUE(e);
    for (const char* bad : {R"({"type": "object", "properties": )", R"({"type": "no-such-type"})",
                            R"({"$ref": "#/definitions/missing"})",
                            // compiles, but admits no value: refused rather than failing at the first draw
                            R"({"$ref": "#"})"}) {
        auto s = e->submit(constrained(0, 8, OutputConstraint::Kind::kJsonSchema, bad));
        ASSERT_FALSE(s.ok()) << bad;
        EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument) << bad;
        EXPECT_EQ(s.error().message.rfind("response_format", 0), 0u) << s.error().message;
        EXPECT_EQ(s.error().message.find('\n'), std::string::npos) << s.error().message;
    }
    EXPECT_EQ(e->stats().n_waiting + e->stats().n_running, 0);
}

struct Call {
    std::string name, arguments;
};

// The output's tool calls as our DSML parser (not the grammar engine) reads them; content must be empty.
std::vector<Call> calls_of(const std::string& text, std::string& content) {
    ChatOutputParser parser(false);
    std::vector<ChatEvent> ev = parser.push(text);
    for (ChatEvent& e : parser.finish()) ev.push_back(std::move(e));
    std::vector<Call> calls;
    for (const ChatEvent& e : ev) {
        if (e.kind == ChatEvent::Kind::kToolCallStart) {
            calls.push_back({e.name, ""});
        } else if (e.kind == ChatEvent::Kind::kToolCallArguments) {
            if (!calls.empty()) calls.back().arguments += e.text;
        } else if (e.kind == ChatEvent::Kind::kContent) {
            content += e.text;
        }
    }
    return calls;
}

// The random model never closes a free string (the closing tag is a 20-byte sequence), so strings here are
// enums; a real model ends its strings itself.
const std::vector<std::string> kTools = {
    R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties":
        {"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]}, "days": {"type": "integer",
         "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": false}}})",
    R"({"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {},
        "additionalProperties": false}}})"};

TEST(StructuredOutput, DemandedToolCallsAreWellFormedDsml) {
    auto e = make_engine();
    ASSERT_TRUE(e);
    const ToolCallDemand demands[] = {{ToolCallDemand::Mode::kForced, "get_weather", false},
                                      {ToolCallDemand::Mode::kRequired, "", false},
                                      {ToolCallDemand::Mode::kRequired, "", true}};
    for (const ToolCallDemand& d : demands) {
        auto grammar = dsml_tool_call_grammar(kTools, d);
        ASSERT_TRUE(grammar.ok()) << grammar.error().message;
        for (uint64_t seed = 0; seed < 4; ++seed) {
            const Output o =
                run(*e, constrained(seed, 300, OutputConstraint::Kind::kStructuralTag, *grammar));
            const std::string where = "mode " + std::to_string(int(d.mode)) + " seed " + std::to_string(seed);
            // Several calls allowed: the random model may keep calling until max_tokens; the calls it closed
            // are checked (the last, cut one is dropped, and the cut text is not held to the layout).
            const bool cut = d.parallel && o.reason == FinishReason::kLength;
            std::string content;
            std::vector<Call> calls = calls_of(o.text, content);
            if (cut) {
                if (!calls.empty()) calls.pop_back();
            } else {
                ASSERT_EQ(o.reason, FinishReason::kStop) << where << ": " << o.text << " " << o.error;
                EXPECT_EQ(content, "") << where << ": " << o.text;
                ASSERT_GE(calls.size(), 1u) << where << ": " << o.text;
            }
            if (!d.parallel) {
                EXPECT_EQ(calls.size(), 1u) << where;
            }
            for (const Call& c : calls) {
                const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
                ASSERT_TRUE(args.is_object()) << where << ": " << c.arguments;
                if (d.mode == ToolCallDemand::Mode::kForced) {
                    EXPECT_EQ(c.name, "get_weather") << where;
                }
                if (c.name == "get_weather") {
                    EXPECT_EQ(args.size(), 2u) << c.arguments;
                    const std::set<std::string> cities = {"Paris", "Tokyo", "Lima"};
                    EXPECT_TRUE(args.contains("city") && args["city"].is_string() &&
                                cities.count(args["city"].get<std::string>()))
                        << c.arguments;
                    EXPECT_TRUE(args.contains("days") && args["days"].is_number_integer() &&
                                args["days"] >= 1 && args["days"] <= 7)
                        << c.arguments;
                } else {
                    EXPECT_EQ(c.name, "now") << where;
                    EXPECT_TRUE(args.empty()) << c.arguments;
                }
            }
        }
    }
}

TEST(StructuredOutput, ToolDemandsNamingNoToolAreRefused) {
    auto r = dsml_tool_call_grammar(kTools, {ToolCallDemand::Mode::kForced, "nope", false});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("nope"), std::string::npos);
    EXPECT_FALSE(dsml_tool_call_grammar({}, {ToolCallDemand::Mode::kRequired, "", true}).ok());
}

TEST(StructuredOutput, ModelsWithoutATokenizerRefuseConstraints) {
    EngineOptions o;
    o.model_dir = kModel;  // the fixture directory holds no tokenizer.json
    auto e = Engine::create(o);
    ASSERT_TRUE(e.ok()) << e.error().message;
    auto s = (*e)->submit(constrained(0, 8, OutputConstraint::Kind::kJsonObject));
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(s.error().message.find("tokenizer"), std::string::npos) << s.error().message;
}

// With the helper process a schema that compiles within the limits is served as without it: the same
// outputs, seed for seed, for a JSON schema and for tool-call tags.
TEST(StructuredOutput, HelperProcessPassesWhatCompiles) {
    auto here = make_engine(), helper = make_engine(DI_BINARY);
    ASSERT_TRUE(here && helper);
    auto tags = dsml_tool_call_grammar(kTools, {ToolCallDemand::Mode::kRequired, "", false});
    ASSERT_TRUE(tags.ok()) << tags.error().message;
    for (uint64_t seed = 0; seed < 4; ++seed) {
        for (const Request& r : {constrained(seed, 120, OutputConstraint::Kind::kJsonSchema, kSchema),
                                 constrained(seed, 300, OutputConstraint::Kind::kStructuralTag, *tags)}) {
            const Output a = run(*here, r), b = run(*helper, r);
            EXPECT_EQ(b.reason, FinishReason::kStop) << b.error;
            EXPECT_EQ(a.text, b.text) << "seed " << seed;
        }
        EXPECT_TRUE(satisfies_schema(
            run(*helper, constrained(seed, 120, OutputConstraint::Kind::kJsonSchema, kSchema)).text));
    }
}

// A schema that stalls the compiler, or one that would take all memory, is refused at submit with the limit
// named, within about the time limit; the engine then serves constrained requests as before (a fresh
// helper).
TEST(StructuredOutput, HelperProcessRefusesSchemasPastItsLimits) {
    nlohmann::json any_of = nlohmann::json::array();  // took the server to 13 GB in 2.5 minutes
    for (int i = 1; i < 2000; ++i) any_of.push_back({{"type", "string"}, {"maxLength", i}});
    const std::string huge = nlohmann::json{{"anyOf", any_of}}.dump();
    {
        auto e = make_engine(DI_BINARY, std::chrono::milliseconds(1500), int64_t(32) << 40);
        ASSERT_TRUE(e);
        const auto t0 = std::chrono::steady_clock::now();
        auto s = e->submit(constrained(0, 8, OutputConstraint::Kind::kJsonSchema, huge));
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ASSERT_FALSE(s.ok());
        EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
        EXPECT_NE(s.error().message.find("did not compile within 1.5 s"), std::string::npos)
            << s.error().message;
        EXPECT_LT(took, 10.0);
        const Output o = run(*e, constrained(1, 120, OutputConstraint::Kind::kJsonSchema, kSchema));
        EXPECT_TRUE(satisfies_schema(o.text)) << o.error;
    }
    {
        auto e = make_engine(DI_BINARY, std::chrono::milliseconds(120000), int64_t(512) << 20);
        ASSERT_TRUE(e);
        auto s = e->submit(constrained(0, 8, OutputConstraint::Kind::kJsonSchema, huge));
        ASSERT_FALSE(s.ok());
        EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
        EXPECT_EQ(s.error().message.rfind("response_format", 0), 0u) << s.error().message;
        EXPECT_NE(s.error().message.find("512 MiB"), std::string::npos) << s.error().message;
        const Output o = run(*e, constrained(2, 120, OutputConstraint::Kind::kJsonSchema, kSchema));
        EXPECT_TRUE(satisfies_schema(o.text)) << o.error;
    }
}

}  // namespace
}  // namespace di
