// POST /v1/messages (Anthropic Messages API): the request becomes the same chat prompt as
// /v1/chat/completions; the model's output (reasoning, content, DSML tool calls, split by ChatOutputParser)
// becomes thinking, text and tool_use content blocks, whole or as Anthropic's stream events
// (message_start, content_block_start/delta/stop, message_delta, message_stop).
#include <fmt/format.h>

#include "server/anthropic_request.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/openai_response.h"
#include "server/server_context.h"

namespace di::server {

namespace {

bool failed(FinishReason r) { return r != FinishReason::kStop && r != FinishReason::kLength; }

std::string event(const char* type, const json& data) {
    return fmt::format("event: {}\ndata: {}\n\n", type,
                       data.dump(-1, ' ', false, json::error_handler_t::replace));
}

Reply error_reply(const ApiError& e) { return Reply{e.status, e.to_anthropic_json().dump(), nullptr}; }

// One message's content blocks as the output streams; apply() returns the stream events it adds.
class MessageBuilder {
  public:
    explicit MessageBuilder(bool thinking) : parser_(thinking) {}

    std::string apply(const RequestEvent& e) {
        std::vector<ChatEvent> evs = parser_.push(e.text);
        if (e.finished)
            for (ChatEvent& ev : parser_.finish()) evs.push_back(std::move(ev));
        std::string out;
        for (const ChatEvent& ev : evs) {
            switch (ev.kind) {
                case ChatEvent::Kind::kReasoning:
                    append(out, "thinking", "thinking", "thinking_delta", ev.text);
                    break;
                case ChatEvent::Kind::kContent:
                    append(out, "text", "text", "text_delta", ev.text);
                    break;
                case ChatEvent::Kind::kToolCallStart:
                    close(out);
                    open(out, json{{"type", "tool_use"},
                                   {"id", make_id("toolu", '_')},
                                   {"name", ev.name},
                                   {"input", json::object()}});
                    args_.clear();
                    break;
                case ChatEvent::Kind::kToolCallArguments:
                    if (open_ != "tool_use") break;  // the parser starts every call first
                    args_ += ev.text;
                    out += event("content_block_delta",
                                 json{{"type", "content_block_delta"},
                                      {"index", blocks_.size() - 1},
                                      {"delta", {{"type", "input_json_delta"}, {"partial_json", ev.text}}}});
                    break;
            }
        }
        completion_tokens = e.completion_tokens;
        if (e.finished) {
            close(out);
            reason = e.reason;
        }
        return out;
    }
    const json& blocks() const { return blocks_; }
    bool has_tool_use() const { return tool_uses_ > 0; }
    // end_turn, max_tokens, tool_use. A stop string also reads end_turn: the engine does not say which of
    // the request's stop strings matched, so stop_sequence stays null.
    const char* stop_reason() const {
        if (has_tool_use()) return "tool_use";
        return reason == FinishReason::kLength ? "max_tokens" : "end_turn";
    }

    FinishReason reason = FinishReason::kNone;
    int64_t completion_tokens = 0;

  private:
    void open(std::string& out, json block) {
        open_ = block["type"].get<std::string>();
        if (open_ == "thinking") block["signature"] = "";  // this server signs nothing
        blocks_.push_back(block);
        if (open_ == "tool_use") ++tool_uses_;
        out += event(
            "content_block_start",
            json{{"type", "content_block_start"}, {"index", blocks_.size() - 1}, {"content_block", block}});
    }
    void close(std::string& out) {
        if (open_.empty()) return;
        if (open_ == "tool_use") {  // the joined pieces are the input object
            json input = json::parse(args_, nullptr, false);
            blocks_.back()["input"] = input.is_object() ? input : json::object();
        }
        out +=
            event("content_block_stop", json{{"type", "content_block_stop"}, {"index", blocks_.size() - 1}});
        open_.clear();
    }
    // Text into the open block of `type`, opening one (and closing another) as needed.
    void append(std::string& out, const char* type, const char* field, const char* delta,
                const std::string& text) {
        if (text.empty()) return;
        if (open_ != type) {
            close(out);
            open(out, json{{"type", type}, {field, ""}});
        }
        blocks_.back()[field] = blocks_.back()[field].get<std::string>() + text;
        out += event("content_block_delta", json{{"type", "content_block_delta"},
                                                 {"index", blocks_.size() - 1},
                                                 {"delta", {{"type", delta}, {field, text}}}});
    }

    ChatOutputParser parser_;
    json blocks_ = json::array();
    std::string open_;  // type of the block receiving text, "" for none
    std::string args_;  // the open tool_use block's argument pieces
    int tool_uses_ = 0;
};

// Anthropic's usage: input_tokens are those not read from the cache (the prefix cache's restored tokens are
// cache_read_input_tokens; the cache keeps states without cache_control, so nothing counts as written).
json anthropic_usage(int64_t prompt_tokens, int64_t cached_tokens) {
    return json{{"input_tokens", prompt_tokens - cached_tokens},
                {"cache_creation_input_tokens", 0},
                {"cache_read_input_tokens", cached_tokens}};
}

json message_json(const ServerContext& ctx, const std::string& id, const json& blocks, json stop_reason,
                  int64_t input_tokens, int64_t output_tokens, int64_t cached_tokens) {
    json u = anthropic_usage(input_tokens, cached_tokens);
    u["output_tokens"] = output_tokens;
    return json{{"id", id},
                {"type", "message"},
                {"role", "assistant"},
                {"model", ctx.model_name},
                {"content", blocks},
                {"stop_reason", std::move(stop_reason)},
                {"stop_sequence", nullptr},
                {"usage", u}};
}

class MessageStream : public SseProducer {
  public:
    MessageStream(ServerContext& ctx, Generation gen, const ChatRequest& r)
        : ctx_(ctx), gen_(std::move(gen)), id_(make_id("msg", '_')), msg_(r.thinking) {
        ++ctx_.counters.streams_open;
    }
    ~MessageStream() override { --ctx_.counters.streams_open; }
    RequestUsage usage() const override { return gen_.usage(); }

    bool pump(std::string& out, std::chrono::milliseconds wait) override {
        if (done_) return false;
        if (!started_) {
            started_ = true;
            out += event("message_start", json{{"type", "message_start"},
                                               {"message", message_json(ctx_, id_, json::array(), nullptr,
                                                                        gen_.prompt_tokens(), 0, 0)}});
        }
        for (ChoiceUpdate& u : gen_.poll(wait)) {
            if (u.event.finished && failed(u.event.reason)) {  // timeout, shutdown: an error event ends it
                gen_.cancel();
                out += event("error", finish_error(u.event).to_anthropic_json());
                done_ = true;
                return false;
            }
            out += msg_.apply(u.event);
        }
        if (!gen_.done()) return true;
        json u =
            anthropic_usage(gen_.prompt_tokens(), gen_.cached_tokens());  // the cache's part is known by now
        u["output_tokens"] = msg_.completion_tokens;
        out += event("message_delta",
                     json{{"type", "message_delta"},
                          {"delta", {{"stop_reason", msg_.stop_reason()}, {"stop_sequence", nullptr}}},
                          {"usage", u}});
        out += event("message_stop", json{{"type", "message_stop"}});
        done_ = true;
        return false;
    }

  private:
    ServerContext& ctx_;
    Generation gen_;
    std::string id_;
    MessageBuilder msg_;
    bool started_ = false, done_ = false;
};

}  // namespace

Reply handle_messages(ServerContext& ctx, const std::string& body, const ClientGone& gone) {
    auto parsed = parse_messages_request(body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return error_reply(*e);
    ChatRequest& r = std::get<ChatRequest>(parsed);
    auto started = start_chat(ctx, r);
    if (auto* e = std::get_if<ApiError>(&started)) return error_reply(*e);
    Generation& gen = std::get<Generation>(started);
    if (r.p.stream) return Reply{200, {}, std::make_unique<MessageStream>(ctx, std::move(gen), r)};
    MessageBuilder msg(r.thinking);
    while (!gen.done()) {
        if (gone()) {
            gen.cancel();
            ++ctx.counters.client_disconnects;
            return error_reply(ApiError{499, "client closed the connection", "", "client_closed"});
        }
        for (ChoiceUpdate& u : gen.poll(std::chrono::milliseconds(100))) {
            if (u.event.finished && failed(u.event.reason)) return error_reply(finish_error(u.event));
            msg.apply(u.event);
        }
    }
    const json out = message_json(ctx, make_id("msg", '_'), msg.blocks(), msg.stop_reason(),
                                  gen.prompt_tokens(), msg.completion_tokens, gen.cached_tokens());
    return Reply{200, out.dump(-1, ' ', false, json::error_handler_t::replace), nullptr, gen.usage()};
}

}  // namespace di::server
