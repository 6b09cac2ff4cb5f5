// DeepSeek-V4 chat prompt encoding, a line-by-line port of the reference encoder
// (vLLM's vllm/tokenizers/deepseek_v4_encoding.py: encode_messages, merge_tool_messages,
// sort_tool_results_by_call_order, _drop_thinking_messages, render_message). Quick-instruction "task"
// messages are internal to DeepSeek and not supported. Test vectors: tests/data/tokenizer/chat_vectors.json.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "deepinfer/tokenizer.h"
#include "io/json_text.h"
#include "tokenizer/python_json.h"
#include "tokenizer/utf8.h"

namespace di {

namespace {

constexpr size_t kQuotedBytes = 80;  // of request text quoted in an error

using ojson = nlohmann::ordered_json;

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
constexpr std::string_view kDsml = "｜DSML｜";
constexpr std::string_view kResponseFormat =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

constexpr std::string_view kToolsPrefix =
    "## Tools\n"
    "\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
    "\"<｜DSML｜tool_calls>\" block like the following:\n"
    "\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n"
    "\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n"
    "\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n"
    "\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n"
    "\n"
    "### Available Tool Schemas\n"
    "\n";
constexpr std::string_view kToolsSuffix =
    "\n"
    "\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the "
    "root cause, rigorously stress-testing your logic against all potential paths, edge cases, and "
    "adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n"
    "\n";

// With split_special_tokens, message text is wrapped in these two bytes while the prompt is assembled; they
// can never occur in UTF-8, so encode_chat_prompt finds the ranges and removes them afterwards.
constexpr char kPlainBegin = '\xff', kPlainEnd = '\xfe';
thread_local bool t_mark_plain = false;

std::string plain(const std::string& text) {
    if (!t_mark_plain || text.empty()) return text;
    return kPlainBegin + text + kPlainEnd;
}

struct Block {
    bool tool_result = false;
    std::string text;  // text, or the tool result content
    std::string tool_use_id;
};

// A message as the reference sees it after merge_tool_messages.
struct Msg {
    std::string role;
    std::string content;
    std::string reasoning;
    std::vector<ChatToolCall> tool_calls;
    std::vector<std::string> tools;
    std::string response_format;
    bool wo_eos = false;
    bool has_blocks = false;
    std::vector<Block> blocks;
};

Result<ojson> parse_json(const std::string& text, const std::string& what) {
    if (io::json_nesting_depth(text) > io::kMaxJsonDepth)
        return make_error(ErrorCode::kInvalidArgument, "chat: {} nests JSON deeper than {} levels", what,
                          io::kMaxJsonDepth);
    ojson j = ojson::parse(text, nullptr, false);
    if (j.is_discarded())
        return make_error(ErrorCode::kInvalidArgument, "chat: {} is not valid JSON: {}", what,
                          quote_line(text, kQuotedBytes));
    return j;
}

// render_tools: each tool's "function" object as JSON, one per line.
Result<std::string> render_tools(const std::vector<std::string>& tools, size_t msg_index) {
    std::string schemas;
    for (size_t i = 0; i < tools.size(); ++i) {
        const std::string what = fmt::format("messages[{}].tools[{}]", msg_index, i);
        DI_TRY(ojson t, parse_json(tools[i], what));
        if (!t.is_object() || !t.contains("function"))
            return make_error(ErrorCode::kInvalidArgument, "chat: {} has no \"function\" object", what);
        if (i) schemas += "\n";
        schemas += tok::python_json_dumps(t["function"]);
    }
    return std::string(kToolsPrefix) + schemas + std::string(kToolsSuffix);
}

// encode_arguments_to_dsml. Unparsable argument text becomes one "arguments" string parameter, as in
// DeepSeek's original encoder.
Result<std::string> render_arguments(const ChatToolCall& tc, size_t msg_index) {
    if (io::json_nesting_depth(tc.arguments) > io::kMaxJsonDepth)
        return make_error(ErrorCode::kInvalidArgument,
                          "chat: messages[{}] tool call '{}' arguments nest JSON deeper than {} levels",
                          msg_index, quote_line(tc.name, kQuotedBytes), io::kMaxJsonDepth);
    ojson args = ojson::parse(tc.arguments, nullptr, false);
    if (args.is_discarded()) args = ojson{{"arguments", tc.arguments}};
    if (!args.is_object())
        return make_error(ErrorCode::kInvalidArgument,
                          "chat: messages[{}] tool call '{}' arguments are not a JSON object: {}", msg_index,
                          quote_line(tc.name, kQuotedBytes), quote_line(tc.arguments, kQuotedBytes));
    std::string out;
    bool first = true;
    for (const auto& [k, v] : args.items()) {
        if (!first) out += "\n";
        first = false;
        const bool is_str = v.is_string();
        out += fmt::format("<{}parameter name=\"{}\" string=\"{}\">{}</{}parameter>", kDsml, k,
                           is_str ? "true" : "false",
                           is_str ? v.get<std::string>() : tok::python_json_dumps(v), kDsml);
    }
    return out;
}

Result<std::string> render_tool_calls(const std::vector<ChatToolCall>& calls, size_t msg_index) {
    std::string list;
    for (size_t i = 0; i < calls.size(); ++i) {
        DI_TRY(std::string args, render_arguments(calls[i], msg_index));
        if (i) list += "\n";
        list += fmt::format("<{}invoke name=\"{}\">\n{}\n</{}invoke>", kDsml, calls[i].name, args, kDsml);
    }
    return fmt::format("\n\n<{}tool_calls>\n{}\n</{}tool_calls>", kDsml, list, kDsml);
}

std::vector<Msg> merge_tool_messages(const std::vector<ChatMessage>& messages) {
    std::vector<Msg> merged;
    for (const ChatMessage& m : messages) {
        if (m.role == "tool") {
            Block b{true, m.content, m.tool_call_id};
            if (!merged.empty() && merged.back().role == "user" && merged.back().has_blocks) {
                merged.back().blocks.push_back(std::move(b));
            } else {
                Msg u;
                u.role = "user";
                u.has_blocks = true;
                u.blocks.push_back(std::move(b));
                merged.push_back(std::move(u));
            }
        } else if (m.role == "user") {
            Block b{false, m.content, {}};
            if (!merged.empty() && merged.back().role == "user" && merged.back().has_blocks) {
                merged.back().blocks.push_back(std::move(b));
            } else {
                Msg u;
                u.role = "user";
                u.content = m.content;
                u.has_blocks = true;
                u.wo_eos = m.wo_eos;
                u.blocks.push_back(std::move(b));
                merged.push_back(std::move(u));
            }
        } else {
            merged.push_back(Msg{m.role,
                                 m.content,
                                 m.reasoning_content,
                                 m.tool_calls,
                                 m.tools,
                                 m.response_format,
                                 m.wo_eos,
                                 false,
                                 {}});
        }
    }
    return merged;
}

void sort_tool_results_by_call_order(std::vector<Msg>& messages) {
    std::map<std::string, int> order;
    for (Msg& m : messages) {
        if (m.role == "assistant" && !m.tool_calls.empty()) {
            order.clear();
            for (size_t i = 0; i < m.tool_calls.size(); ++i)
                if (!m.tool_calls[i].id.empty()) order.emplace(m.tool_calls[i].id, static_cast<int>(i));
        } else if (m.role == "user" && !m.blocks.empty()) {
            std::vector<Block> results;
            for (const Block& b : m.blocks)
                if (b.tool_result) results.push_back(b);
            if (results.size() <= 1 || order.empty()) continue;
            auto key = [&](const Block& b) {
                auto it = order.find(b.tool_use_id);
                return it == order.end() ? 0 : it->second;
            };
            std::stable_sort(results.begin(), results.end(),
                             [&](const Block& a, const Block& b) { return key(a) < key(b); });
            size_t k = 0;
            for (Block& b : m.blocks)
                if (b.tool_result) b = results[k++];
        }
    }
}

int last_user_index(const std::vector<Msg>& messages) {
    for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i)
        if (messages[i].role == "user" || messages[i].role == "developer") return i;
    return -1;
}

std::vector<Msg> drop_thinking_messages(std::vector<Msg> messages) {
    const int last_user = last_user_index(messages);
    std::vector<Msg> out;
    for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
        Msg& m = messages[i];
        const bool keep = m.role == "user" || m.role == "system" || m.role == "tool" ||
                          m.role == "latest_reminder" || m.role == "direct_search_results";
        if (keep || i >= last_user) {
            out.push_back(std::move(m));
        } else if (m.role == "assistant") {
            m.reasoning.clear();
            out.push_back(std::move(m));
        }  // developer and other roles before the last user message are dropped
    }
    return out;
}

Result<std::string> render_message(size_t index, const std::vector<Msg>& messages, bool thinking,
                                   bool drop_thinking, const std::string& effort) {
    const Msg& msg = messages[index];
    const int last_user = last_user_index(messages);
    std::string prompt;
    if (index == 0 && thinking && effort == "max") prompt += kReasoningEffortMax;

    auto tools_and_format = [&](std::string& out) -> Status {
        if (!msg.tools.empty()) {
            DI_TRY(std::string t, render_tools(msg.tools, index));
            out += "\n\n" + t;
        }
        if (!msg.response_format.empty()) {
            DI_TRY(ojson rf,
                   parse_json(msg.response_format, fmt::format("messages[{}].response_format", index)));
            out += "\n\n" + std::string(kResponseFormat) + tok::python_json_dumps(rf);
        }
        return ok_status();
    };

    if (msg.role == "system") {
        prompt += plain(msg.content);
        DI_TRY_STATUS(tools_and_format(prompt));
    } else if (msg.role == "developer") {
        if (msg.content.empty())
            return make_error(ErrorCode::kInvalidArgument, "chat: messages[{}] (developer) has empty content",
                              index);
        prompt += kUser;
        prompt += plain(msg.content);
        DI_TRY_STATUS(tools_and_format(prompt));
    } else if (msg.role == "user") {
        prompt += kUser;
        for (size_t i = 0; i < msg.blocks.size(); ++i) {
            if (i) prompt += "\n\n";
            const Block& b = msg.blocks[i];
            prompt += b.tool_result ? "<tool_result>" + plain(b.text) + "</tool_result>" : plain(b.text);
        }
    } else if (msg.role == "latest_reminder") {
        prompt += kLatestReminder;
        prompt += plain(msg.content);
    } else if (msg.role == "assistant") {
        std::string tc;
        if (!msg.tool_calls.empty()) {
            DI_TRY(tc, render_tool_calls(msg.tool_calls, index));
        }
        if (thinking && (!drop_thinking || static_cast<int>(index) > last_user))
            prompt += plain(msg.reasoning) + std::string(kThinkEnd);
        prompt += plain(msg.content) + tc;
        if (!msg.wo_eos) prompt += kEos;
    } else {
        return make_error(ErrorCode::kInvalidArgument,
                          "chat: messages[{}] has role '{}', expected system, developer, user, assistant, "
                          "tool or latest_reminder",
                          index, quote_line(msg.role, kQuotedBytes));
    }

    if (index + 1 < messages.size() && messages[index + 1].role != "assistant" &&
        messages[index + 1].role != "latest_reminder")
        return prompt;
    if (msg.role == "user" || msg.role == "developer") {
        prompt += kAssistant;
        const bool open = thinking && (!drop_thinking || static_cast<int>(index) >= last_user);
        prompt += open ? kThinkStart : kThinkEnd;
    }
    return prompt;
}

Result<std::string> encode_chat_text(const std::vector<ChatMessage>& input, const ChatOptions& options) {
    if (!options.reasoning_effort.empty() && options.reasoning_effort != "high" &&
        options.reasoning_effort != "max")
        return make_error(ErrorCode::kInvalidArgument, "chat: reasoning_effort '{}' is not one of high, max",
                          quote_line(options.reasoning_effort, kQuotedBytes));
    std::vector<ChatMessage> with_tools;
    const std::vector<ChatMessage>* messages = &input;
    if (!options.tools.empty()) {  // vLLM's DeepSeek-V4 wrapper: a leading system message carries the tools
        with_tools.reserve(input.size() + 1);
        ChatMessage sys;
        sys.role = "system";
        sys.tools = options.tools;
        with_tools.push_back(std::move(sys));
        with_tools.insert(with_tools.end(), input.begin(), input.end());
        messages = &with_tools;
    }
    std::vector<Msg> full = merge_tool_messages(*messages);
    sort_tool_results_by_call_order(full);
    std::string prompt = options.add_bos ? std::string(kBos) : std::string();
    bool drop = options.drop_thinking;
    if (std::any_of(full.begin(), full.end(), [](const Msg& m) { return !m.tools.empty(); })) drop = false;
    if (options.thinking && drop) full = drop_thinking_messages(std::move(full));
    for (size_t i = 0; i < full.size(); ++i) {
        DI_TRY(std::string part, render_message(i, full, options.thinking, drop, options.reasoning_effort));
        prompt += part;
    }
    return prompt;
}

}  // namespace

Result<ChatPrompt> encode_chat_prompt(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
    if (!options.split_special_tokens) {
        DI_TRY(std::string text, encode_chat_text(messages, options));
        return ChatPrompt{std::move(text), {}};
    }
    // Valid UTF-8 never holds the two marker bytes, and plain ranges need unchanged offsets.
    for (size_t i = 0; i < messages.size(); ++i)
        for (const std::string* t : {&messages[i].content, &messages[i].reasoning_content})
            if (!tok::utf8_valid(*t))
                return make_error(ErrorCode::kInvalidArgument, "chat: messages[{}] is not valid UTF-8", i);
    t_mark_plain = true;
    auto text = encode_chat_text(messages, options);
    t_mark_plain = false;
    if (!text.ok()) return text.error();
    ChatPrompt p;
    p.text.reserve(text->size());
    size_t begin = 0;
    for (const char c : *text) {
        if (c == kPlainBegin) {
            begin = p.text.size();
        } else if (c == kPlainEnd) {
            p.plain.push_back({begin, p.text.size()});
        } else {
            p.text += c;
        }
    }
    return p;
}

Result<std::string> encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
    DI_TRY(ChatPrompt p, encode_chat_prompt(messages, options));
    return std::move(p.text);
}

}  // namespace di
