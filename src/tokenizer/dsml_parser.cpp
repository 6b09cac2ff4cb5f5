// Streaming parser of V4 model output: reasoning until "</think>", then content, DSML tool-call blocks
// ("\n\n<｜DSML｜tool_calls>" ... "</｜DSML｜tool_calls>"), end at "<｜end▁of▁sentence｜>". The grammar of a
// block follows the reference parse_tool_calls (vllm/tokenizers/deepseek_v4_encoding.py); each invoke is emitted as
// soon as its closing tag arrives. Anything that does not parse is passed on as content text.
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

enum class Step { kDone, kNeedMore, kError };

struct Invoke {
    std::string name, arguments;
};

// Reference: re.findall(r'^\s*name="(.*?)">\n$', text, re.DOTALL).
std::optional<std::string> parse_invoke_name(std::string_view t) {
    size_t i = 0;
    while (i < t.size() && (t[i] == ' ' || t[i] == '\n' || t[i] == '\t' || t[i] == '\r' || t[i] == '\f' || t[i] == '\v')) ++i;
    if (t.substr(i, 6) != "name=\"") return std::nullopt;
    i += 6;
    for (size_t p = t.find("\">\n", i); p != std::string_view::npos; p = t.find("\">\n", p + 1)) {
        const std::string_view rest = t.substr(p + 3);
        if (rest.empty() || rest == "\n") return std::string(t.substr(i, p - i));
    }
    return std::nullopt;
}

// Reference: re.findall(r'^ name="(.*?)" string="(true|false)">(.*?)<$', text, re.DOTALL).
bool parse_param(std::string_view t, std::string& name, bool& is_string, std::string& value) {
    if (t.substr(0, 7) != " name=\"") return false;
    std::string_view tail = t.substr(7);
    const bool ends_lt = !tail.empty() && tail.back() == '<';
    const bool ends_lt_nl = tail.size() >= 2 && tail.substr(tail.size() - 2) == "<\n";
    for (size_t p = tail.find("\" string=\""); p != std::string_view::npos; p = tail.find("\" string=\"", p + 1)) {
        std::string_view after = tail.substr(p + 10);
        for (std::string_view flag : {std::string_view("true\">"), std::string_view("false\">")}) {
            if (after.substr(0, flag.size()) != flag) continue;
            std::string_view v = after.substr(flag.size());
            // `(.*?)<$`: the shortest value, so prefer "<" + final newline only when not ending in "<".
            size_t cut;
            if (ends_lt && !v.empty()) cut = v.size() - 1;
            else if (ends_lt_nl && v.size() >= 2) cut = v.size() - 2;
            else continue;
            name = std::string(tail.substr(0, p));
            is_string = flag[0] == 't';
            value = std::string(v.substr(0, cut));
            return true;
        }
    }
    return false;
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

// Parses one invoke starting at `pos` (just after "\n" following the block start or the previous invoke).
// On kDone, `pos` is past the invoke's "</｜DSML｜invoke" and `out` holds the call.
Step parse_invoke(std::string_view t, size_t& pos, Invoke& out) {
    size_t at = 0;
    int stop = find_stop(t, pos, {kParam, kInvokeEnd}, at);
    if (stop < 0) return Step::kNeedMore;
    auto name = parse_invoke_name(t.substr(pos, at - pos));
    if (!name) return Step::kError;
    size_t i = at + (stop == 0 ? kParam.size() : kInvokeEnd.size());
    std::vector<std::pair<std::string, std::string>> args;  // key -> JSON value text
    while (stop == 0) {
        const size_t end = t.find(kParamEnd, i);
        if (end == std::string_view::npos) return Step::kNeedMore;
        std::string pname, value;
        bool is_string = false;
        if (!parse_param(t.substr(i, end - i), pname, is_string, value)) return Step::kError;
        for (const auto& a : args)
            if (a.first == pname) return Step::kError;  // duplicate parameter
        args.emplace_back(pname, is_string ? to_json_string(value) : value);
        i = end + kParamEnd.size();
        stop = find_stop(t, i, {kParam, kInvokeEnd}, at);
        if (stop < 0) return Step::kNeedMore;
        if (t.substr(i, at - i) != ">\n") return Step::kError;
        i = at + (stop == 0 ? kParam.size() : kInvokeEnd.size());
    }
    std::string json = "{";
    for (size_t k = 0; k < args.size(); ++k) {
        if (k) json += ", ";
        json += to_json_string(args[k].first) + ": " + args[k].second;
    }
    out = Invoke{std::move(*name), json + "}"};
    pos = i;
    return Step::kDone;
}

}  // namespace

struct ChatOutputParser::State {
    enum class Mode { kReasoning, kContent, kTools, kDone };
    Mode mode = Mode::kContent;
    std::string buf;     // undecided text of the current mode
    size_t parsed = 0;   // kTools: bytes of buf consumed by emitted invokes
    std::string block_prefix;  // kTools: text that opened the block, replayed as content on error
    std::vector<ChatEvent> events;

    void emit(ChatEvent::Kind kind, std::string_view text) {
        if (text.empty()) return;
        if (!events.empty() && events.back().kind == kind && kind != ChatEvent::Kind::kToolCall) {
            events.back().text += text;
        } else {
            events.push_back(ChatEvent{kind, std::string(text), {}, {}});
        }
    }

    // Consumes as much of buf as can be decided; returns false when waiting for more text.
    bool step(bool final) {
        switch (mode) {
            case Mode::kReasoning: return step_reasoning(final);
            case Mode::kContent: return step_content(final);
            case Mode::kTools: return step_tools(final);
            case Mode::kDone: buf.clear(); return false;
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
                block_prefix = std::string(nn ? before.substr(before.size() - 2) : "") + std::string(kBlockStart);
                if (nn) before.remove_suffix(2);
            }
            emit(ChatEvent::Kind::kContent, before);
            buf.erase(0, at + (stop == 0 ? kBlockStart.size() : kEos.size()));
            mode = stop == 0 ? Mode::kTools : Mode::kDone;
            parsed = 0;
            return true;
        }
        size_t hold = final ? 0 : std::max(partial_suffix(buf, kBlockStart), partial_suffix(buf, kEos));
        for (int k = 0; k < 2 && !final && hold < buf.size() && buf[buf.size() - hold - 1] == '\n'; ++k) ++hold;
        emit(ChatEvent::Kind::kContent, std::string_view(buf).substr(0, buf.size() - hold));
        buf.erase(0, buf.size() - hold);
        return false;
    }

    // buf holds the text after "<｜DSML｜tool_calls>"; buf[0, parsed) produced the invokes emitted so far.
    bool step_tools(bool final) {
        const std::string_view t = buf;
        while (true) {
            // Between elements the reference expects exactly ">\n"; our block start includes the first ">".
            const std::string_view sep = parsed == 0 ? "\n" : ">\n";
            const std::string_view head = t.substr(parsed);
            if (head.size() < sep.size()) {
                if (head != sep.substr(0, head.size())) return fail();
                return final ? fail() : false;
            }
            if (head.substr(0, sep.size()) != sep) return fail();
            const std::string_view rest = head.substr(sep.size());
            if (rest.substr(0, kBlockEnd.size()) == kBlockEnd) {
                buf.erase(0, parsed + sep.size() + kBlockEnd.size());
                mode = Mode::kContent;
                return true;
            }
            if (rest.substr(0, kInvoke.size()) != kInvoke) {
                const bool maybe = rest.size() < kBlockEnd.size() &&
                                   (kBlockEnd.substr(0, rest.size()) == rest || kInvoke.substr(0, rest.size()) == rest);
                return maybe && !final ? false : fail();
            }
            size_t pos = parsed + sep.size() + kInvoke.size();
            Invoke inv;
            const Step s = parse_invoke(t, pos, inv);
            if (s == Step::kNeedMore) return final ? fail() : false;
            if (s == Step::kError) return fail();
            events.push_back(ChatEvent{ChatEvent::Kind::kToolCall, {}, std::move(inv.name), std::move(inv.arguments)});
            parsed = pos;
        }
    }

    // Malformed block: what was not emitted as tool calls goes back to content parsing (the opening tag
    // itself is emitted as text, so the same block is not detected again).
    bool fail() {
        if (parsed == 0) {
            emit(ChatEvent::Kind::kContent, block_prefix);
        } else {
            buf.erase(0, parsed);
        }
        parsed = 0;
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
