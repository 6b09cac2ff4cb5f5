// Streaming parser of V4 model output: reasoning until "</think>", then content, DSML tool-call blocks
// ("\n\n<｜DSML｜tool_calls>" ... "</｜DSML｜tool_calls>"), end at "<｜end▁of▁sentence｜>". The grammar of a
// block follows the reference parse_tool_calls (the reference encoder's). A call streams as OpenAI streams
// it: its name once the invoke's header is complete, then its JSON arguments in pieces (a string value as
// its bytes arrive, any other value whole when its parameter closes), so the pieces always join into a
// JSON object. Text that does not parse is passed on as content: a malformed block before any call has
// started comes back whole; after a call has started, that call is closed with what it streamed (an open
// string value closed) and the text from the failing element on is content.
#include <algorithm>
#include <optional>

#include "deepinfer/tokenizer.h"
#include "tokenizer/python_json.h"

namespace di {

namespace {

constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kBlockStart = "<｜DSML｜tool_calls>";
constexpr std::string_view kBlockEnd = "</｜DSML｜tool_calls>";
constexpr std::string_view kInvoke = "<｜DSML｜invoke";
constexpr std::string_view kInvokeEnd = "</｜DSML｜invoke";
constexpr std::string_view kParam = "<｜DSML｜parameter";
constexpr std::string_view kParamEnd = "/｜DSML｜parameter";

// Length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_suffix(std::string_view s, std::string_view marker) {
    for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
        if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
    return 0;
}

std::string to_json_string(const std::string& s) { return tok::python_json_dumps(nlohmann::ordered_json(s)); }

// Reference: re.findall(r'^\s*name="(.*?)">\n$', text, re.DOTALL).
std::optional<std::string> parse_invoke_name(std::string_view t) {
    size_t i = 0;
    while (i < t.size() &&
           (t[i] == ' ' || t[i] == '\n' || t[i] == '\t' || t[i] == '\r' || t[i] == '\f' || t[i] == '\v'))
        ++i;
    if (t.substr(i, 6) != "name=\"") return std::nullopt;
    i += 6;
    for (size_t p = t.find("\">\n", i); p != std::string_view::npos; p = t.find("\">\n", p + 1)) {
        const std::string_view rest = t.substr(p + 3);
        if (rest.empty() || rest == "\n") return std::string(t.substr(i, p - i));
    }
    return std::nullopt;
}

// Longest prefix of `s` that ends on a UTF-8 code point boundary (a split multi-byte character waits).
size_t utf8_complete(std::string_view s) {
    for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
        const auto c = static_cast<unsigned char>(s[s.size() - back]);
        if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
        const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return len > back ? s.size() - back : s.size();
    }
    return s.size();
}

// A string value's bytes as they go inside its JSON quotes.
std::string json_string_body(std::string_view s) {
    const std::string q = to_json_string(std::string(s));
    return q.substr(1, q.size() - 2);
}

// Finds the earliest of `stops` in t[from..]; returns its index in `stops` or -1.
int find_stop(std::string_view t, size_t from, std::initializer_list<std::string_view> stops, size_t& pos) {
    int best = -1;
    pos = std::string_view::npos;
    int k = 0;
    for (std::string_view s : stops) {
        const size_t p = t.find(s, from);
        if (p != std::string_view::npos && p < pos) {
            pos = p;
            best = k;
        }
        ++k;
    }
    return best;
}

}  // namespace

struct ChatOutputParser::State {
    enum class Mode { kReasoning, kContent, kTools, kDone };
    // Inside a block: before an invoke or the block's end, in an invoke's header, in a parameter's header,
    // in its value, after its closing tag.
    enum class Tool { kBetween, kHeader, kParamHead, kValue, kAfterParam };
    Mode mode = Mode::kContent;
    std::string buf;           // undecided text of the current mode
    std::string block_prefix;  // kTools: text that opened the block, replayed as content on error
    std::vector<ChatEvent> events;

    // kTools: positions in buf (the text after the block's opening tag).
    Tool tool = Tool::kBetween;
    size_t pos = 0;     // the next byte to parse
    size_t parsed = 0;  // end of the last closed invoke: content resumes here on an error between calls
    size_t elem = 0;    // start of the element being parsed in an open call: content resumes here
    bool open = false;  // a call's name and "{" are out
    std::vector<std::string> keys;  // the open call's parameter names
    std::string key;                // the parameter being parsed
    bool is_string = false;
    size_t value0 = 0, value_out = 0;  // its value's first byte; bytes of a string value already out

    void emit(ChatEvent::Kind kind, std::string_view text) {
        if (text.empty()) return;
        if (!events.empty() && events.back().kind == kind && kind != ChatEvent::Kind::kToolCallStart) {
            events.back().text += text;
        } else {
            events.push_back(ChatEvent{kind, std::string(text), {}});
        }
    }
    void args(std::string_view text) { emit(ChatEvent::Kind::kToolCallArguments, text); }

    // Consumes as much of buf as can be decided; returns false when waiting for more text.
    bool step(bool final) {
        switch (mode) {
            case Mode::kReasoning:
                return step_reasoning(final);
            case Mode::kContent:
                return step_content(final);
            case Mode::kTools:
                return step_tools(final);
            case Mode::kDone:
                buf.clear();
                return false;
        }
        return false;
    }

    bool step_reasoning(bool final) {
        size_t at = 0;
        const int stop = find_stop(buf, 0, {kThinkEnd, kEos}, at);
        if (stop >= 0) {
            emit(ChatEvent::Kind::kReasoning, std::string_view(buf).substr(0, at));
            buf.erase(0, at + (stop == 0 ? kThinkEnd.size() : kEos.size()));
            mode = stop == 0 ? Mode::kContent : Mode::kDone;
            return true;
        }
        const size_t hold = final ? 0 : std::max(partial_suffix(buf, kThinkEnd), partial_suffix(buf, kEos));
        emit(ChatEvent::Kind::kReasoning, std::string_view(buf).substr(0, buf.size() - hold));
        buf.erase(0, buf.size() - hold);
        return false;
    }

    bool step_content(bool final) {
        size_t at = 0;
        const int stop = find_stop(buf, 0, {kBlockStart, kEos}, at);
        if (stop >= 0) {
            std::string_view before = std::string_view(buf).substr(0, at);
            if (stop == 0) {
                const bool nn = before.size() >= 2 && before.substr(before.size() - 2) == "\n\n";
                block_prefix =
                    std::string(nn ? before.substr(before.size() - 2) : "") + std::string(kBlockStart);
                if (nn) before.remove_suffix(2);
            }
            emit(ChatEvent::Kind::kContent, before);
            buf.erase(0, at + (stop == 0 ? kBlockStart.size() : kEos.size()));
            mode = stop == 0 ? Mode::kTools : Mode::kDone;
            start_block();
            return true;
        }
        size_t hold = final ? 0 : std::max(partial_suffix(buf, kBlockStart), partial_suffix(buf, kEos));
        for (int k = 0; k < 2 && !final && hold < buf.size() && buf[buf.size() - hold - 1] == '\n'; ++k)
            ++hold;
        emit(ChatEvent::Kind::kContent, std::string_view(buf).substr(0, buf.size() - hold));
        buf.erase(0, buf.size() - hold);
        return false;
    }

    void start_block() {
        tool = Tool::kBetween;
        pos = parsed = elem = 0;
        open = false;
    }

    // buf holds the text after "<｜DSML｜tool_calls>".
    bool step_tools(bool final) {
        const std::string_view t = buf;
        while (true) {
            switch (tool) {
                case Tool::kBetween: {
                    // Between elements the reference expects exactly ">\n"; our block start includes the
                    // first ">".
                    const std::string_view sep = pos == 0 ? "\n" : ">\n";
                    const std::string_view head = t.substr(pos);
                    if (head.size() < sep.size()) {
                        if (head != sep.substr(0, head.size())) return fail();
                        return final ? fail() : false;
                    }
                    if (head.substr(0, sep.size()) != sep) return fail();
                    const std::string_view rest = head.substr(sep.size());
                    if (rest.substr(0, kBlockEnd.size()) == kBlockEnd) {
                        buf.erase(0, pos + sep.size() + kBlockEnd.size());
                        mode = Mode::kContent;
                        return true;
                    }
                    if (rest.substr(0, kInvoke.size()) != kInvoke) {
                        const bool maybe =
                            rest.size() < kBlockEnd.size() && (kBlockEnd.substr(0, rest.size()) == rest ||
                                                               kInvoke.substr(0, rest.size()) == rest);
                        return maybe && !final ? false : fail();
                    }
                    pos += sep.size() + kInvoke.size();
                    tool = Tool::kHeader;
                    break;
                }
                case Tool::kHeader: {  // name="..."> up to the first parameter or the invoke's end
                    size_t at = 0;
                    const int stop = find_stop(t, pos, {kParam, kInvokeEnd}, at);
                    if (stop < 0) return final ? fail() : false;
                    auto name = parse_invoke_name(t.substr(pos, at - pos));
                    if (!name) return fail();
                    events.push_back(ChatEvent{ChatEvent::Kind::kToolCallStart, {}, std::move(*name)});
                    args("{");
                    open = true;
                    keys.clear();
                    elem = at;
                    pos = at + (stop == 0 ? kParam.size() : kInvokeEnd.size());
                    tool = stop == 0 ? Tool::kParamHead : Tool::kBetween;
                    if (stop == 1) close_call();
                    break;
                }
                case Tool::kParamHead: {  // reference: ^ name="(.*?)" string="(true|false)">(.*?)<$
                    constexpr std::string_view kName = " name=\"", kTrue = "\" string=\"true\">",
                                               kFalse = "\" string=\"false\">";
                    const size_t end = t.find(kParamEnd, pos);
                    const std::string_view region =
                        t.substr(pos, end == std::string_view::npos ? end : end - pos);
                    if (region.substr(0, kName.size()) !=
                        kName.substr(0, std::min(region.size(), kName.size())))
                        return fail();
                    size_t p = std::string_view::npos;
                    bool flag = false;
                    if (region.size() >= kName.size()) {  // the first `" string="true|false">` ends the name
                        const size_t pt = region.find(kTrue, kName.size()),
                                     pf = region.find(kFalse, kName.size());
                        p = std::min(pt, pf);
                        flag = p == pt;
                    }
                    if (p == std::string_view::npos)
                        return end != std::string_view::npos || final ? fail() : false;
                    key = std::string(region.substr(kName.size(), p - kName.size()));
                    if (std::find(keys.begin(), keys.end(), key) != keys.end()) return fail();  // duplicate
                    is_string = flag;
                    value0 = value_out = pos + p + (flag ? kTrue : kFalse).size();
                    if (is_string) args((keys.empty() ? "" : ", ") + to_json_string(key) + ": \"");
                    tool = Tool::kValue;
                    break;
                }
                case Tool::kValue: {  // up to the first "/｜DSML｜parameter", less the "<" or "<\n" before it
                    const size_t end = t.find(kParamEnd, value0);
                    if (end == std::string_view::npos) {
                        if (final) return fail();
                        if (is_string) {  // what cannot be the terminator goes out now
                            const size_t hold =
                                std::max(partial_suffix(t, std::string("<").append(kParamEnd)),
                                         partial_suffix(t, std::string("<\n").append(kParamEnd)));
                            const size_t upto = std::max(value_out, t.size() - std::min(hold, t.size()));
                            const size_t n = utf8_complete(t.substr(value_out, upto - value_out));
                            args(json_string_body(t.substr(value_out, n)));
                            value_out += n;
                        }
                        return false;
                    }
                    const std::string_view v = t.substr(value0, end - value0);
                    size_t cut = 0;
                    if (!v.empty() && v.back() == '<')
                        cut = 1;
                    else if (v.size() >= 2 && v.substr(v.size() - 2) == "<\n")
                        cut = 2;
                    else
                        return fail();
                    const size_t value_end = end - cut;
                    if (is_string) {
                        args(json_string_body(t.substr(value_out, value_end - value_out)) + "\"");
                    } else {
                        args((keys.empty() ? "" : ", ") + to_json_string(key) + ": " +
                             std::string(t.substr(value0, value_end - value0)));
                    }
                    keys.push_back(std::move(key));
                    pos = elem = end + kParamEnd.size();
                    tool = Tool::kAfterParam;
                    break;
                }
                case Tool::kAfterParam: {  // exactly ">\n", then the next parameter or the invoke's end
                    size_t at = 0;
                    const int stop = find_stop(t, pos, {kParam, kInvokeEnd}, at);
                    if (stop < 0) return final ? fail() : false;
                    if (t.substr(pos, at - pos) != ">\n") return fail();
                    elem = at;
                    pos = at + (stop == 0 ? kParam.size() : kInvokeEnd.size());
                    tool = stop == 0 ? Tool::kParamHead : Tool::kBetween;
                    if (stop == 1) close_call();
                    break;
                }
            }
        }
    }

    void close_call() {
        args("}");
        open = false;
        parsed = pos;
    }

    // Malformed or unfinished block. With no call open, what was not emitted as tool calls goes back to
    // content parsing (the opening tag itself as text, so the same block is not detected again). With a
    // call open, the call is closed with the pieces it streamed (a string value so far is kept) and content
    // resumes at the element that failed (after the value, for a string value already streamed).
    bool fail() {
        if (open) {
            size_t resume = elem;
            if (tool == Tool::kValue && is_string) {
                args("\"");
                const size_t end = buf.find(kParamEnd, value0);
                resume = end == std::string::npos ? buf.size() : end;
            }
            args("}");
            open = false;
            buf.erase(0, resume);
        } else if (parsed == 0) {
            emit(ChatEvent::Kind::kContent, block_prefix);
        } else {
            buf.erase(0, parsed);
        }
        start_block();
        mode = Mode::kContent;
        return true;
    }
};

ChatOutputParser::ChatOutputParser(bool thinking) : state_(std::make_unique<State>()) {
    state_->mode = thinking ? State::Mode::kReasoning : State::Mode::kContent;
}
ChatOutputParser::~ChatOutputParser() = default;
ChatOutputParser::ChatOutputParser(ChatOutputParser&&) noexcept = default;
ChatOutputParser& ChatOutputParser::operator=(ChatOutputParser&&) noexcept = default;

std::vector<ChatEvent> ChatOutputParser::push(std::string_view text) {
    if (state_->mode != State::Mode::kDone) state_->buf += text;
    while (state_->step(false)) {
    }
    return std::exchange(state_->events, {});
}

std::vector<ChatEvent> ChatOutputParser::finish() {
    while (state_->step(true)) {
    }
    state_->step(true);
    state_->mode = State::Mode::kDone;
    return std::exchange(state_->events, {});
}

}  // namespace di
