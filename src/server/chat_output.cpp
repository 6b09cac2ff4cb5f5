#include "server/chat_output.h"

#include "server/openai_response.h"

namespace di::server {

json apply_event(ChatChoice& c, const RequestEvent& e) {
    std::vector<ChatEvent> evs = c.parser.push(e.text);
    if (e.finished)
        for (ChatEvent& ev : c.parser.finish()) evs.push_back(std::move(ev));
    json delta = json::object();
    for (const ChatEvent& ev : evs) {
        switch (ev.kind) {
            case ChatEvent::Kind::kReasoning:
                c.reasoning += ev.text;
                delta["reasoning_content"] = delta.value("reasoning_content", "") + ev.text;
                break;
            case ChatEvent::Kind::kContent:
                c.content += ev.text;
                delta["content"] = delta.value("content", "") + ev.text;
                break;
            case ChatEvent::Kind::kToolCallStart: {  // OpenAI's first chunk of a call: id, type, name
                json call = {{"id", make_id("call", '_')},
                             {"type", "function"},
                             {"function", {{"name", ev.name}, {"arguments", ""}}}};
                json streamed = call;
                streamed["index"] = c.tool_calls.size();
                c.tool_calls.push_back(std::move(call));
                delta["tool_calls"].push_back(std::move(streamed));
                break;
            }
            case ChatEvent::Kind::kToolCallArguments: {  // then argument pieces with the call's index
                if (c.tool_calls.empty()) break;         // the parser starts every call first
                const size_t index = c.tool_calls.size() - 1;
                c.tool_calls.back()["function"]["arguments"] =
                    c.tool_calls.back()["function"]["arguments"].get<std::string>() + ev.text;
                json& calls = delta["tool_calls"];
                if (calls.is_array() && !calls.empty() && calls.back()["index"] == index) {
                    json& f = calls.back()["function"];
                    f["arguments"] = f.value("arguments", "") + ev.text;
                } else {
                    calls.push_back(json{{"index", index}, {"function", {{"arguments", ev.text}}}});
                }
                break;
            }
        }
    }
    c.completion_tokens = e.completion_tokens;
    if (e.finished) c.reason = e.reason;
    return delta;
}

}  // namespace di::server
