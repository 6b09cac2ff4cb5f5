#include "server/openai_request.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "server/request_fields.h"

namespace di::server {
namespace {

using namespace request_fields;

MaybeError parse_stop(Fields& f, CommonParams& p) {
    const json* v = f.get("stop");
    if (!v) return std::nullopt;
    if (v->is_string()) {
        p.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
        if (v->size() > 16)
            return bad_request(fmt::format("'stop' has {} entries, at most 16", v->size()), "stop");
        for (const json& s : *v) {
            if (!s.is_string()) return wrong_type("stop", "a string or an array of strings", s);
            p.stop.push_back(s.get<std::string>());
        }
    } else {
        return wrong_type("stop", "a string or an array of strings", *v);
    }
    for (const auto& s : p.stop)
        if (s.empty()) return bad_request("'stop' strings must not be empty", "stop");
    return std::nullopt;
}

MaybeError parse_token_ids(const json& v, const std::string& key, std::vector<int32_t>& out) {
    if (!v.is_array()) return wrong_type(key, "an array of token ids", v);
    for (const json& t : v) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
            return bad_request(
                fmt::format("'{}' must hold non-negative integer token ids, got {}", key, t.dump()), key);
        out.push_back(int32_t(t.get<int64_t>()));
    }
    return std::nullopt;
}

// Fields shared by both endpoints.
MaybeError parse_common(Fields& f, CommonParams& p, bool chat) {
    DI_API_TRY(f.string("model", p.model));
    if (p.model.empty()) return bad_request("'model' is required", "model");
    std::optional<int64_t> i;
    DI_API_TRY(f.integer("max_tokens", INT64_MIN, INT64_MAX, i));
    if (chat) DI_API_TRY(f.integer("max_completion_tokens", INT64_MIN, INT64_MAX, i));
    if (i && (*i < 0 || (*i == 0 && !p.echo)))
        return bad_request(
            fmt::format("max_tokens is {}, it must be at least 1{}", *i,
                        chat ? "" : " (0 only with echo: the prompt scored, nothing generated)"),
            "max_tokens");
    p.max_tokens = i;
    std::optional<int64_t> min_tokens;
    DI_API_TRY(f.integer("min_tokens", 0, INT64_MAX, min_tokens));
    if (min_tokens && i && *min_tokens > *i)
        return bad_request(fmt::format("min_tokens {} exceeds max_tokens {}", *min_tokens, *i), "min_tokens");
    p.min_tokens = min_tokens.value_or(0);
    SamplingOptions& s = p.sampling;
    DI_API_TRY(f.number("temperature", 0, 2, s.temperature));
    DI_API_TRY(f.number("top_p", 0, 1, s.top_p));
    if (s.top_p <= 0) return bad_request("'top_p' must be greater than 0", "top_p");
    std::optional<int64_t> top_k;
    DI_API_TRY(f.integer("top_k", -1, 1 << 20, top_k));
    if (top_k) s.top_k = *top_k < 0 ? 0 : int(*top_k);  // -1 = off (vLLM)
    DI_API_TRY(f.number("min_p", 0, 1, s.min_p));
    DI_API_TRY(f.number("presence_penalty", -2, 2, s.presence_penalty));
    DI_API_TRY(f.number("frequency_penalty", -2, 2, s.frequency_penalty));
    DI_API_TRY(f.number("repetition_penalty", 0.01, 10, s.repetition_penalty));
    std::optional<int64_t> seed;
    DI_API_TRY(f.integer("seed", INT64_MIN, INT64_MAX, seed));
    if (seed) s.seed = uint64_t(*seed);
    DI_API_TRY(parse_stop(f, p));
    if (const json* v = f.get("stop_token_ids"))
        DI_API_TRY(parse_token_ids(*v, "stop_token_ids", p.stop_token_ids));
    DI_API_TRY(f.boolean("ignore_eos", p.ignore_eos));
    DI_API_TRY(f.boolean("skip_special_tokens", p.skip_special_tokens));
    std::optional<int64_t> n;
    DI_API_TRY(f.integer("n", 1, 16, n));
    if (n) p.n = int(*n);
    std::optional<int64_t> best_of;
    DI_API_TRY(f.integer("best_of", 1, 16, best_of));
    if (best_of && *best_of != p.n) return bad_request("'best_of' other than n is not supported", "best_of");
    DI_API_TRY(f.boolean("stream", p.stream));
    DI_API_TRY(f.string("cache_salt", p.cache_salt));
    std::optional<int64_t> plp;
    DI_API_TRY(f.integer("prompt_logprobs", 0, 20, plp));
    if (plp) p.prompt_logprobs = int(*plp);
    if (plp && p.stream)
        return bad_request("'prompt_logprobs' is not supported with stream: true", "prompt_logprobs");
    if (const json* so = f.get("stream_options")) {
        if (!so->is_object()) return wrong_type("stream_options", "an object", *so);
        if (!p.stream)
            return bad_request("'stream_options' is only allowed with stream: true", "stream_options");
        Fields g(*so, "stream_options.");
        DI_API_TRY(g.boolean("include_usage", p.include_usage));
        g.ignore("continuous_usage_stats");
        DI_API_TRY(g.finish());
    }
    if (const json* lb = f.get("logit_bias"))
        if (!lb->is_object() || !lb->empty())
            return bad_request("'logit_bias' is not supported", "logit_bias");
    // Metadata-only fields (they change nothing about the output here): accepted and ignored, as frameworks
    // send them on every request.
    for (const char* key :
         {"user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"})
        f.ignore(key);
    return std::nullopt;
}

MaybeError parse_content(const json& v, const std::string& key, std::string& out) {
    if (v.is_string()) {
        out = v.get<std::string>();
        return std::nullopt;
    }
    if (!v.is_array()) return wrong_type(key, "a string or an array of text parts", v);
    for (const json& part : v) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string())
            return bad_request(
                fmt::format("'{}': only parts of type 'text' with a string 'text' are supported", key), key);
        out += part["text"].get<std::string>();
    }
    return std::nullopt;
}

MaybeError parse_tool_calls(const json& v, const std::string& key, std::vector<ChatToolCall>& out) {
    if (!v.is_array()) return wrong_type(key, "an array", v);
    for (size_t i = 0; i < v.size(); ++i) {
        const json& c = v[i];
        const std::string k = fmt::format("{}[{}]", key, i);
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
            return bad_request(fmt::format("'{}' must be an object with a 'function' object", k), k);
        const json& fn = c["function"];
        if (!fn.contains("name") || !fn["name"].is_string())
            return bad_request(fmt::format("'{}.function.name' must be a string", k), k);
        ChatToolCall tc;
        tc.name = fn["name"].get<std::string>();
        if (c.contains("id") && c["id"].is_string()) tc.id = c["id"].get<std::string>();
        if (fn.contains("arguments")) {
            if (fn["arguments"].is_string())
                tc.arguments = fn["arguments"].get<std::string>();
            else if (fn["arguments"].is_object())
                tc.arguments = fn["arguments"].dump();
            else
                return wrong_type(k + ".function.arguments", "a JSON string", fn["arguments"]);
        } else {
            tc.arguments = "{}";
        }
        out.push_back(std::move(tc));
    }
    return std::nullopt;
}

MaybeError parse_message(const json& m, size_t index, ChatMessage& out) {
    const std::string key = fmt::format("messages[{}]", index);
    if (!m.is_object()) return wrong_type(key, "an object", m);
    Fields f(m, key + ".");
    DI_API_TRY(f.string("role", out.role));
    static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
    if (!roles.count(out.role))
        return bad_request(
            fmt::format("'{}.role' is '{}', expected system, developer, user, assistant or tool", key,
                        out.role),
            key + ".role");
    if (const json* c = f.get("content")) DI_API_TRY(parse_content(*c, key + ".content", out.content));
    f.ignore("name");
    if (out.role == "assistant") {
        DI_API_TRY(f.string("reasoning_content", out.reasoning_content));
        if (const json* tc = f.get("tool_calls"))
            DI_API_TRY(parse_tool_calls(*tc, key + ".tool_calls", out.tool_calls));
        f.ignore("refusal");
    }
    if (out.role == "tool") {
        DI_API_TRY(f.string("tool_call_id", out.tool_call_id));
        if (out.tool_call_id.empty())
            return bad_request(fmt::format("'{}.tool_call_id' is required for a tool message", key), key);
    }
    return f.finish();
}

MaybeError parse_tools(Fields& f, ChatRequest& r) {
    const json* tools = f.get("tools");
    std::string choice = "auto", forced;
    if (const json* tc = f.get("tool_choice")) {
        if (tc->is_string()) {
            choice = tc->get<std::string>();
            if (choice != "auto" && choice != "none" && choice != "required")
                return bad_request(
                    fmt::format("tool_choice '{}' is not one of \"auto\", \"none\", \"required\"", choice),
                    "tool_choice");
        } else if (tc->is_object()) {  // {"type": "function", "function": {"name": ...}}
            const json* fn = tc->contains("function") ? &(*tc)["function"] : nullptr;
            if (tc->value("type", "") != "function" || !fn || !fn->is_object() || !fn->contains("name") ||
                !(*fn)["name"].is_string())
                return bad_request(
                    "a named tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    "tool_choice");
            choice = "forced";
            forced = (*fn)["name"].get<std::string>();
        } else {
            return wrong_type("tool_choice", "a string or an object", *tc);
        }
    }
    bool parallel = true, found = false;
    DI_API_TRY(f.boolean("parallel_tool_calls", parallel));
    if (tools) {
        if (!tools->is_array()) return wrong_type("tools", "an array", *tools);
        for (size_t i = 0; i < tools->size(); ++i) {
            const json& t = (*tools)[i];
            const std::string k = fmt::format("tools[{}]", i);
            if (!t.is_object() || string_or_empty(t, "type") != "function" || !t.contains("function") ||
                !t["function"].is_object() || !t["function"].contains("name") ||
                !t["function"]["name"].is_string())
                return bad_request(
                    fmt::format("'{}' must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}",
                                k),
                    k);
            if (choice != "none") r.tools.push_back(t.dump());
            found |= t["function"]["name"] == forced;
        }
    }
    using Mode = ToolCallDemand::Mode;
    if (choice == "forced") return settle_tool_demand(r, {Mode::kForced, forced, false}, found);
    if (choice == "required") return settle_tool_demand(r, {Mode::kRequired, "", parallel}, found);
    if (choice == "auto" && !parallel) return settle_tool_demand(r, {Mode::kAtMostOne, "", false}, found);
    return std::nullopt;
}

MaybeError parse_thinking(Fields& f, ChatRequest& r) {
    if (const json* t = f.get("thinking")) {
        if (t->is_boolean()) {
            r.thinking = t->get<bool>();
        } else if (t->is_object() && t->contains("type") && (*t)["type"].is_string()) {
            const std::string type = (*t)["type"].get<std::string>();
            if (type != "enabled" && type != "disabled")
                return bad_request("'thinking.type' must be \"enabled\" or \"disabled\"", "thinking");
            r.thinking = type == "enabled";
        } else {
            return wrong_type("thinking", "a boolean or {\"type\": \"enabled\"|\"disabled\"}", *t);
        }
    }
    if (const json* k = f.get("chat_template_kwargs")) {
        if (!k->is_object()) return wrong_type("chat_template_kwargs", "an object", *k);
        Fields g(*k, "chat_template_kwargs.");
        DI_API_TRY(g.boolean("thinking", r.thinking));
        DI_API_TRY(g.finish());
    }
    DI_API_TRY(f.string("reasoning_effort", r.reasoning_effort));
    if (!r.reasoning_effort.empty() && r.reasoning_effort != "high" && r.reasoning_effort != "max")
        return bad_request(
            fmt::format("reasoning_effort '{}' is not supported (\"high\" or \"max\")", r.reasoning_effort),
            "reasoning_effort");
    return std::nullopt;
}

}  // namespace

namespace {

// response_format: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema":
// {"name", "schema", "strict", "description"}} (OpenAI's shapes). The schema itself is checked when the
// engine compiles it (a 400 naming response_format there too).
MaybeError parse_response_format(Fields& f, CommonParams& p) {
    const json* rf = f.get("response_format");
    if (!rf) return std::nullopt;
    if (!rf->is_object()) return wrong_type("response_format", "an object", *rf);
    Fields g(*rf, "response_format.");
    std::string type;
    DI_API_TRY(g.string("type", type));
    if (type == "text") {
        p.constraint = {};
    } else if (type == "json_object") {
        p.constraint.kind = OutputConstraint::Kind::kJsonObject;
    } else if (type == "json_schema") {
        const json* js = g.get("json_schema");
        if (!js)
            return bad_request("response_format 'json_schema' needs a 'json_schema' object",
                               "response_format");
        if (!js->is_object()) return wrong_type("response_format.json_schema", "an object", *js);
        Fields h(*js, "response_format.json_schema.");
        std::string name, description;
        bool strict = false;
        DI_API_TRY(h.string("name", name));
        DI_API_TRY(h.string("description", description));
        DI_API_TRY(h.boolean("strict", strict));  // the output is always held to the schema
        const json* schema = h.get("schema");
        if (!schema) return bad_request("response_format.json_schema needs a 'schema'", "response_format");
        if (!schema->is_object() && !schema->is_boolean())
            return wrong_type("response_format.json_schema.schema", "an object", *schema);
        DI_API_TRY(h.finish());
        p.constraint.kind = OutputConstraint::Kind::kJsonSchema;
        p.constraint.json_schema = schema->dump();
    } else {
        return bad_request(
            fmt::format("response_format type '{}' is not supported (text, json_object, json_schema)",
                        type.empty() ? "(missing)" : type),
            "response_format");
    }
    return g.finish();
}

}  // namespace

MaybeError settle_tool_demand(ChatRequest& r, const ToolCallDemand& wanted, bool forced_found) {
    if (wanted.mode == ToolCallDemand::Mode::kAtMostOne) {
        if (!r.tools.empty()) r.tool_demand = wanted;
        return std::nullopt;
    }
    if (r.tools.empty()) return bad_request("this tool_choice needs 'tools'", "tool_choice");
    if (wanted.mode == ToolCallDemand::Mode::kForced && !forced_found)
        return bad_request(
            fmt::format("tool_choice names '{}', which is not one of the tools", wanted.forced),
            "tool_choice");
    r.tool_demand = wanted;
    return std::nullopt;
}

namespace {
ApiResult<ChatRequest> parse_chat_request_unguarded(std::string_view body) {
    auto parsed = parse_body(body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
    const json& j = std::get<json>(parsed);
    Fields f(j, "");
    ChatRequest r;
    DI_API_TRY(parse_common(f, r.p, true));
    bool logprobs = false;
    DI_API_TRY(f.boolean("logprobs", logprobs));
    std::optional<int64_t> top;
    DI_API_TRY(f.integer("top_logprobs", 0, 20, top));
    if (top && !logprobs) return bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    r.p.sampling.logprobs = logprobs;
    r.p.sampling.top_logprobs = int(top.value_or(0));
    const json* msgs = f.get("messages");
    if (!msgs) return bad_request("'messages' is required", "messages");
    if (!msgs->is_array()) return wrong_type("messages", "an array", *msgs);
    if (msgs->empty()) return bad_request("'messages' must not be empty", "messages");
    for (size_t i = 0; i < msgs->size(); ++i) {
        ChatMessage m;
        DI_API_TRY(parse_message((*msgs)[i], i, m));
        r.messages.push_back(std::move(m));
    }
    DI_API_TRY(parse_tools(f, r));
    DI_API_TRY(parse_thinking(f, r));
    DI_API_TRY(parse_response_format(f, r.p));
    if (r.tool_demand && r.p.constraint.kind != OutputConstraint::Kind::kNone)
        return bad_request(
            "a response_format other than text cannot be combined with tool_choice \"required\", a "
            "named function or parallel_tool_calls false",
            "response_format");
    DI_API_TRY(f.finish());
    return r;
}
}  // namespace

ApiResult<ChatRequest> parse_chat_request(std::string_view body) {
    return refuse_exceptions([&] { return parse_chat_request_unguarded(body); });
}

namespace {
ApiResult<CompletionRequest> parse_completion_request_unguarded(std::string_view body) {
    auto parsed = parse_body(body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
    const json& j = std::get<json>(parsed);
    Fields f(j, "");
    CompletionRequest r;
    DI_API_TRY(f.boolean("echo", r.p.echo));
    DI_API_TRY(parse_common(f, r.p, false));
    std::optional<int64_t> lp;
    DI_API_TRY(f.integer("logprobs", 0, 20, lp));
    r.p.sampling.logprobs = lp.has_value();
    r.p.sampling.top_logprobs = int(lp.value_or(0));
    DI_API_TRY(parse_response_format(f, r.p));
    if (r.p.echo && r.p.stream) return bad_request("'echo' is not supported with stream: true", "echo");
    std::string suffix;
    DI_API_TRY(f.string("suffix", suffix));
    if (!suffix.empty()) return bad_request("'suffix' is not supported", "suffix");
    const json* p = f.get("prompt");
    if (!p) return bad_request("'prompt' is required", "prompt");
    if (p->is_string()) {
        r.prompt_texts.push_back(p->get<std::string>());
    } else if (p->is_array() && !p->empty() && (*p)[0].is_string()) {
        for (const json& s : *p) {
            if (!s.is_string()) return wrong_type("prompt", "an array of strings", s);
            r.prompt_texts.push_back(s.get<std::string>());
        }
    } else if (p->is_array() && !p->empty() && (*p)[0].is_array()) {
        for (const json& ids : *p)
            DI_API_TRY(parse_token_ids(ids, "prompt", r.prompt_token_ids.emplace_back()));
    } else if (p->is_array() && !p->empty()) {
        DI_API_TRY(parse_token_ids(*p, "prompt", r.prompt_token_ids.emplace_back()));
    } else if (p->is_array()) {
        return bad_request("'prompt' must not be empty", "prompt");
    } else {
        return wrong_type("prompt", "a string, an array of strings or an array of token ids", *p);
    }
    for (const auto& t : r.prompt_texts)
        if (t.empty()) return bad_request("'prompt' must not be empty", "prompt");
    for (const auto& t : r.prompt_token_ids)
        if (t.empty()) return bad_request("'prompt' must not be empty", "prompt");
    if (r.prompt_texts.size() + r.prompt_token_ids.size() > 16)
        return bad_request("at most 16 prompts per request", "prompt");
    DI_API_TRY(f.finish());
    return r;
}
}  // namespace

ApiResult<CompletionRequest> parse_completion_request(std::string_view body) {
    return refuse_exceptions([&] { return parse_completion_request_unguarded(body); });
}

}  // namespace di::server
