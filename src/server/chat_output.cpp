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
            case ChatEvent::Kind::kToolCall: {
                json call = {{"id", make_id("call", '_')},
                             {"type", "function"},
                             {"function", {{"name", ev.name}, {"arguments", ev.arguments}}}};
                json streamed = call;
                streamed["index"] = c.tool_calls.size();
                c.tool_calls.push_back(std::move(call));
                delta["tool_calls"].push_back(std::move(streamed));
                break;
            }
        }
    }
    c.completion_tokens = e.completion_tokens;
    if (e.finished) c.reason = e.reason;
    return delta;
}

}  // namespace di::server
