#include "server/anthropic_request.h"

#include "server/request_fields.h"

namespace di::server {
namespace {

using namespace request_fields;

// A block's `text`-like string field.
MaybeError block_string(const json& b, const char* field, const std::string& key, std::string& out) {
    auto it = b.find(field);
    if (it == b.end() || !it->is_string())
        return bad_request(fmt::format("'{}.{}' must be a string", key, field), key);
    out = it->get<std::string>();
    return std::nullopt;
}

// A string, or an array of text blocks joined (system prompts, tool_result contents).
MaybeError text_of(const json& v, const std::string& key, std::string& out) {
    if (v.is_string()) {
        out = v.get<std::string>();
        return std::nullopt;
    }
    if (!v.is_array()) return wrong_type(key, "a string or an array of text blocks", v);
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string k = fmt::format("{}[{}]", key, i);
        if (!v[i].is_object() || string_or_empty(v[i], "type") != "text")
            return bad_request(fmt::format("'{}': only blocks of type 'text' are supported here", k), k);
        std::string t;
        DI_API_TRY(block_string(v[i], "text", k, t));
        out += t;
    }
    return std::nullopt;
}

// One Anthropic message -> chat messages: a user turn's tool_result blocks become tool messages (in order,
// before its text), an assistant turn's thinking, text and tool_use blocks one assistant message.
MaybeError parse_message(const json& m, size_t index, std::vector<ChatMessage>& out) {
    const std::string key = fmt::format("messages[{}]", index);
    if (!m.is_object()) return wrong_type(key, "an object", m);
    Fields f(m, key + ".");
    std::string role;
    DI_API_TRY(f.string("role", role));
    if (role != "user" && role != "assistant")
        return bad_request(fmt::format("'{}.role' is '{}', expected user or assistant", key, role),
                           key + ".role");
    const json* content = f.get("content");
    if (!content) return bad_request(fmt::format("'{}.content' is required", key), key + ".content");
    DI_API_TRY(f.finish());
    ChatMessage msg;
    msg.role = role;
    bool tool_results = false;  // a user turn of tool results alone adds no user message
    if (content->is_string()) {
        msg.content = content->get<std::string>();
        out.push_back(std::move(msg));
        return std::nullopt;
    }
    if (!content->is_array())
        return wrong_type(key + ".content", "a string or an array of content blocks", *content);
    for (size_t i = 0; i < content->size(); ++i) {
        const json& b = (*content)[i];
        const std::string k = fmt::format("{}.content[{}]", key, i);
        if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
            return bad_request(fmt::format("'{}' must be a content block with a string 'type'", k), k);
        const std::string type = b["type"].get<std::string>();
        if (type == "text") {
            std::string t;
            DI_API_TRY(block_string(b, "text", k, t));
            msg.content += t;
        } else if (type == "tool_result" && role == "user") {
            ChatMessage tool;
            tool.role = "tool";
            DI_API_TRY(block_string(b, "tool_use_id", k, tool.tool_call_id));
            if (auto it = b.find("content"); it != b.end() && !it->is_null())
                DI_API_TRY(text_of(*it, k + ".content", tool.content));
            out.push_back(std::move(tool));
            tool_results = true;
        } else if (type == "tool_use" && role == "assistant") {
            ChatToolCall tc;
            DI_API_TRY(block_string(b, "id", k, tc.id));
            DI_API_TRY(block_string(b, "name", k, tc.name));
            auto it = b.find("input");
            if (it == b.end() || !it->is_object())
                return bad_request(fmt::format("'{}.input' must be an object", k), k);
            tc.arguments = it->dump();
            msg.tool_calls.push_back(std::move(tc));
        } else if (type == "thinking" && role == "assistant") {
            std::string t;
            DI_API_TRY(block_string(b, "thinking", k, t));
            msg.reasoning_content += t;
        } else if (type == "redacted_thinking" && role == "assistant") {
            // opaque to this server: nothing of it reaches the prompt
        } else {
            return bad_request(
                fmt::format("'{}': content blocks of type '{}' are not supported in a {} message", k, type,
                            role),
                k);
        }
    }
    if (role == "assistant" || !tool_results || !msg.content.empty()) out.push_back(std::move(msg));
    return std::nullopt;
}

// Anthropic tools -> the OpenAI tool objects the chat encoder takes.
MaybeError parse_tools(Fields& f, ChatRequest& r) {
    std::string choice = "auto", forced;
    bool no_parallel = false, found = false;
    if (const json* tc = f.get("tool_choice")) {
        if (!tc->is_object() || !tc->contains("type") || !(*tc)["type"].is_string())
            return wrong_type("tool_choice", "an object with a string 'type'", *tc);
        Fields g(*tc, "tool_choice.");
        DI_API_TRY(g.string("type", choice));
        DI_API_TRY(g.boolean("disable_parallel_tool_use", no_parallel));
        if (choice == "tool") {
            DI_API_TRY(g.string("name", forced));
            if (forced.empty()) return bad_request("tool_choice 'tool' needs a 'name'", "tool_choice");
        }
        if (choice != "auto" && choice != "none" && choice != "any" && choice != "tool")
            return bad_request(
                fmt::format("tool_choice '{}' is not one of \"auto\", \"any\", \"tool\", \"none\"", choice),
                "tool_choice");
        DI_API_TRY(g.finish());
    }
    const json* tools = f.get("tools");
    if (tools && !tools->is_array()) return wrong_type("tools", "an array", *tools);
    for (size_t i = 0; tools && i < tools->size(); ++i) {
        const json& t = (*tools)[i];
        const std::string k = fmt::format("tools[{}]", i);
        if (!t.is_object()) return wrong_type(k, "an object", t);
        Fields g(t, k + ".");
        std::string name, description, type = "custom";
        DI_API_TRY(g.string("name", name));
        if (name.empty()) return bad_request(fmt::format("'{}.name' is required", k), k + ".name");
        DI_API_TRY(g.string("description", description));
        DI_API_TRY(g.string("type", type));
        if (type != "custom")
            return bad_request(fmt::format("'{}': tools of type '{}' are not supported", k, type),
                               k + ".type");
        const json* schema = g.get("input_schema");
        if (!schema || !schema->is_object())
            return bad_request(fmt::format("'{}.input_schema' must be an object", k), k + ".input_schema");
        g.ignore("cache_control");
        DI_API_TRY(g.finish());
        json fn = {{"name", name}};
        if (!description.empty()) fn["description"] = description;
        fn["parameters"] = *schema;
        if (choice != "none") r.tools.push_back(json{{"type", "function"}, {"function", fn}}.dump());
        found |= name == forced;
    }
    // The same demands as OpenAI's tool_choice (held by constrained decoding).
    using Mode = ToolCallDemand::Mode;
    if (choice == "tool") return settle_tool_demand(r, {Mode::kForced, forced, false}, found);
    if (choice == "any") return settle_tool_demand(r, {Mode::kRequired, "", !no_parallel}, found);
    if (choice == "auto" && no_parallel) return settle_tool_demand(r, {Mode::kAtMostOne, "", false}, found);
    return std::nullopt;
}

}  // namespace

namespace {
ApiResult<ChatRequest> parse_messages_request_unguarded(std::string_view body) {
    auto parsed = parse_body(body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
    const json& j = std::get<json>(parsed);
    Fields f(j, "");
    ChatRequest r;
    CommonParams& p = r.p;
    DI_API_TRY(f.string("model", p.model));
    if (p.model.empty()) return bad_request("'model' is required", "model");
    std::optional<int64_t> max_tokens;
    DI_API_TRY(f.integer("max_tokens", 1, INT64_MAX, max_tokens));
    if (!max_tokens) return bad_request("'max_tokens' is required", "max_tokens");
    p.max_tokens = max_tokens;
    DI_API_TRY(f.number("temperature", 0, 1, p.sampling.temperature));
    DI_API_TRY(f.number("top_p", 0, 1, p.sampling.top_p));
    if (p.sampling.top_p <= 0) return bad_request("'top_p' must be greater than 0", "top_p");
    std::optional<int64_t> top_k;
    DI_API_TRY(f.integer("top_k", 0, 1 << 20, top_k));
    if (top_k) p.sampling.top_k = int(*top_k);
    if (const json* v = f.get("stop_sequences")) {
        if (!v->is_array() || v->size() > 16)
            return wrong_type("stop_sequences", "an array of at most 16 strings", *v);
        for (const json& s : *v) {
            if (!s.is_string() || s.get<std::string>().empty())
                return bad_request("'stop_sequences' must hold non-empty strings", "stop_sequences");
            p.stop.push_back(s.get<std::string>());
        }
    }
    DI_API_TRY(f.boolean("stream", p.stream));
    DI_API_TRY(f.boolean("ignore_eos", p.ignore_eos));  // as on the OpenAI routes (vLLM's extension)
    p.include_usage = true;                             // message_start and message_delta always carry usage
    if (const json* sys = f.get("system")) {
        ChatMessage m;
        m.role = "system";
        DI_API_TRY(text_of(*sys, "system", m.content));
        r.messages.push_back(std::move(m));
    }
    const json* msgs = f.get("messages");
    if (!msgs) return bad_request("'messages' is required", "messages");
    if (!msgs->is_array()) return wrong_type("messages", "an array", *msgs);
    if (msgs->empty()) return bad_request("'messages' must not be empty", "messages");
    for (size_t i = 0; i < msgs->size(); ++i) DI_API_TRY(parse_message((*msgs)[i], i, r.messages));
    DI_API_TRY(parse_tools(f, r));
    if (const json* t = f.get("thinking")) {
        if (!t->is_object() || !t->contains("type") || !(*t)["type"].is_string())
            return wrong_type("thinking", "{\"type\": \"enabled\"|\"disabled\"}", *t);
        Fields g(*t, "thinking.");
        std::string type;
        DI_API_TRY(g.string("type", type));
        if (type != "enabled" && type != "disabled")
            return bad_request("'thinking.type' must be \"enabled\" or \"disabled\"", "thinking");
        std::optional<int64_t> budget;  // the model decides its own thinking length; accepted, not enforced
        DI_API_TRY(g.integer("budget_tokens", 1, INT64_MAX, budget));
        DI_API_TRY(g.finish());
        r.thinking = type == "enabled";
    }
    // Hints that change nothing about the output here (prompt caching, routing, metadata).
    for (const char* key : {"metadata", "service_tier", "cache_control", "inference_geo"}) f.ignore(key);
    DI_API_TRY(f.finish());
    return r;
}
}  // namespace

ApiResult<ChatRequest> parse_messages_request(std::string_view body) {
    return refuse_exceptions([&] { return parse_messages_request_unguarded(body); });
}

}  // namespace di::server
