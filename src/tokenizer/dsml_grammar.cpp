// dsml_tool_call_grammar: V4's DSML tool-call block as an xgrammar structural tag, so that tool_choice
// "required", a named function or parallel_tool_calls false hold whatever the model would say. The layout is
// exactly what V4 writes and DeepSeek's parser (and ChatOutputParser) accept, newline for newline
// (tests/data/tokenizer/dsml_vectors.json): <｜DSML｜parameter name="k" string="true">raw text</...> for
// strings, string="false" with JSON for everything else.
#include <nlohmann/json.hpp>
#include <set>

#include "deepinfer/tokenizer.h"

namespace di {
namespace {

using json = nlohmann::ordered_json;  // properties stay in the order the tool lists them

constexpr const char* kCallsBegin = "<｜DSML｜tool_calls>\n";
constexpr const char* kCallsEnd = "</｜DSML｜tool_calls>";

constexpr const char* kParamEnd = "</｜DSML｜parameter>\n";

json const_string(const std::string& v) { return {{"type", "const_string"}, {"value", v}}; }

json tag(const std::string& begin, const json& content, const std::string& end) {
    return {{"type", "tag"}, {"begin", begin}, {"content", content}, {"end", end}};
}

// One parameter exactly as V4 writes it: a string value raw (string="true"), anything else as JSON.
json parameter(const std::string& key, const json& schema) {
    const std::string head = "<｜DSML｜parameter name=\"" + key + "\" string=";
    const json type = schema.is_object() ? schema.value("type", json()) : json();
    const bool only_strings = type == "string";
    const bool no_strings = type.is_string() && type != "string";
    json raw;  // the string alternative
    if (schema.is_object() && schema.contains("enum") && schema["enum"].is_array()) {
        json options = json::array();
        for (const json& v : schema["enum"])
            if (v.is_string()) options.push_back(const_string(v.get<std::string>()));
        if (!options.empty())
            raw = options.size() == 1 ? options[0] : json{{"type", "or"}, {"elements", options}};
    } else if (!no_strings) {
        raw = {{"type", "any_text"}};
        if (schema.is_object() && schema.contains("maxLength") && schema["maxLength"].is_number_unsigned())
            raw["max_chars"] = schema["maxLength"];
    }
    json alternatives = json::array();
    if (!raw.is_null()) alternatives.push_back(tag(head + "\"true\">", raw, kParamEnd));
    if (!only_strings)
        alternatives.push_back(
            tag(head + "\"false\">", {{"type", "json_schema"}, {"json_schema", schema}}, kParamEnd));
    return alternatives.size() == 1 ? alternatives[0] : json{{"type", "or"}, {"elements", alternatives}};
}

// An invoke: its parameters in the order of the tool's JSON text, required ones always, optional ones maybe
// (a caller that parsed the request with sorted keys passes them sorted). Schemas
// without a flat list of properties fall back on xgrammar's own "deepseek_xml" rendering (one whitespace
// character between parameters, so V4's "\n" stays possible).
json invoke_tag(const std::string& name, const json& parameters) {
    const std::string begin = "<｜DSML｜invoke name=\"" + name + "\">\n", end = "</｜DSML｜invoke>\n";
    const json* props = parameters.contains("properties") ? &parameters["properties"] : nullptr;
    if (!props || !props->is_object() || parameters.contains("anyOf") || parameters.contains("oneOf") ||
        parameters.contains("allOf") || parameters.contains("$ref"))
        return tag(begin,
                   {{"type", "json_schema"},
                    {"json_schema", parameters},
                    {"style", "deepseek_xml"},
                    {"max_whitespace_cnt", 1}},
                   end);
    std::set<std::string> required;
    if (parameters.contains("required") && parameters["required"].is_array())
        for (const json& r : parameters["required"])
            if (r.is_string()) required.insert(r.get<std::string>());
    json elements = json::array();
    for (const auto& [key, schema] : props->items()) {
        const json p = parameter(key, schema);
        elements.push_back(required.count(key) ? p : json{{"type", "optional"}, {"content", p}});
    }
    const json content = elements.empty()       ? const_string("")
                         : elements.size() == 1 ? elements[0]
                                                : json{{"type", "sequence"}, {"elements", elements}};
    return tag(begin, content, end);
}

json invokes(const json& tags, bool stop_after_first) {
    return {{"type", "tags_with_separator"},
            {"tags", tags},
            {"separator", ""},
            {"at_least_one", true},
            {"stop_after_first", stop_after_first}};
}

}  // namespace

Result<std::string> dsml_tool_call_grammar(const std::vector<std::string>& tools,
                                           const ToolCallDemand& demand) {
    json tags = json::array();
    bool found = false;
    for (size_t i = 0; i < tools.size(); ++i) {
        const json t = json::parse(tools[i], nullptr, false);
        if (t.is_discarded() || !t.contains("function") || !t["function"].is_object() ||
            !t["function"].contains("name") || !t["function"]["name"].is_string())
            return make_error(ErrorCode::kInvalidArgument, "tools[{}]: not an OpenAI function tool", i);
        const std::string name = t["function"]["name"].get<std::string>();
        if (demand.mode == ToolCallDemand::Mode::kForced && name != demand.forced) continue;
        found = true;
        // No schema, or a non-object one: any parameters (the encoder shows none to the model then).
        const json params = t["function"].contains("parameters") && t["function"]["parameters"].is_object()
                                ? t["function"]["parameters"]
                                : json{{"type", "object"}};
        tags.push_back(invoke_tag(name, params));
    }
    if (demand.mode == ToolCallDemand::Mode::kForced && !found)
        return make_error(ErrorCode::kInvalidArgument, "tool_choice names {}, which is not one of the tools",
                          json(demand.forced).dump(-1, ' ', false, json::error_handler_t::replace));
    if (tags.empty()) return make_error(ErrorCode::kInvalidArgument, "tool_choice needs at least one tool");
    json format;
    if (demand.mode == ToolCallDemand::Mode::kAtMostOne) {
        json block = {
            {"type", "tag"}, {"begin", kCallsBegin}, {"content", invokes(tags, true)}, {"end", kCallsEnd}};
        format = {{"type", "triggered_tags"},
                  {"triggers", json::array({"<｜DSML｜tool_calls>"})},
                  {"tags", json::array({block})},
                  {"excludes", json::array({"<think>", "</think>"})},
                  {"stop_after_first", true}};
    } else {
        const bool one = demand.mode == ToolCallDemand::Mode::kForced || !demand.parallel;
        const json open = {{"type", "const_string"}, {"value", std::string("\n\n") + kCallsBegin}};
        const json close = {{"type", "const_string"}, {"value", kCallsEnd}};
        format = {{"type", "sequence"}, {"elements", json::array({open, invokes(tags, one), close})}};
    }
    return json{{"type", "structural_tag"}, {"format", format}}.dump();
}

}  // namespace di
