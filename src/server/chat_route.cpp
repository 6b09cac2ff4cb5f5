// POST /v1/chat/completions: messages -> V4 chat prompt -> engine; model output is split into reasoning,
// content and DSML tool calls (OpenAI tool_calls) by ChatOutputParser, whole or as server-sent events.
#include <fmt/format.h>

#include "server/chat_output.h"
#include "server/chat_prompt.h"
#include "server/generation.h"
#include "server/openai_response.h"
#include "server/server_context.h"

namespace di::server {
namespace {

bool failed(FinishReason r) { return r != FinishReason::kStop && r != FinishReason::kLength; }

class ChatStream : public SseProducer {
  public:
    ChatStream(ServerContext& ctx, Generation gen, const ChatRequest& r)
        : ctx_(ctx),
          gen_(std::move(gen)),
          id_(make_id("chatcmpl")),
          created_(unix_time()),
          logprobs_(r.p.sampling.logprobs),
          include_usage_(r.p.include_usage) {
        for (size_t i = 0; i < gen_.n_choices(); ++i) choices_.emplace_back(r.thinking);
        ++ctx_.counters.streams_open;
    }
    ~ChatStream() override { --ctx_.counters.streams_open; }

    RequestUsage usage() const override { return gen_.usage(); }

    bool pump(std::string& out, std::chrono::milliseconds wait) override {
        if (done_) return false;
        if (!started_) {
            started_ = true;
            for (size_t i = 0; i < choices_.size(); ++i)
                out += sse(chunk(i, json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
        }
        for (ChoiceUpdate& u : gen_.poll(wait)) {
            ChatChoice& c = choices_[u.choice];
            if (u.event.finished &&
                failed(u.event.reason)) {  // timeout, shutdown: end the stream with an error
                gen_.cancel();
                out += sse(finish_error(u.event).to_json());
                return finish(out);
            }
            const json delta = apply_event(c, u.event);
            json lp = nullptr;
            if (logprobs_ && !u.event.tokens.empty())
                lp = json{{"content", chat_logprob_entries(ctx_.engine.tokenizer(), u.event.tokens)}};
            json reason = nullptr;
            if (u.event.finished) reason = api_finish_reason(c.reason, !c.tool_calls.empty());
            if (!delta.empty() || !lp.is_null() || !reason.is_null())
                out += sse(chunk(u.choice, delta, lp, reason));
        }
        if (!gen_.done()) return true;
        out += sse_stream_end(base(), include_usage_, gen_.prompt_tokens(), total_completion_tokens(choices_),
                              gen_.cached_tokens());
        done_ = true;
        return false;
    }

  private:
    bool finish(std::string& out) {
        out += kSseDone;
        done_ = true;
        return false;
    }
    json base() const {
        return json{{"id", id_},
                    {"object", "chat.completion.chunk"},
                    {"created", created_},
                    {"model", ctx_.model_name}};
    }
    json chunk(size_t i, json delta, json lp, json reason) const {
        json j = base();
        j["choices"] = json::array({json{{"index", i},
                                         {"delta", std::move(delta)},
                                         {"logprobs", std::move(lp)},
                                         {"finish_reason", std::move(reason)}}});
        if (include_usage_) j["usage"] = nullptr;
        return j;
    }

    ServerContext& ctx_;
    Generation gen_;
    std::vector<ChatChoice> choices_;
    std::string id_;
    int64_t created_;
    bool logprobs_, include_usage_;
    bool started_ = false, done_ = false;
};

Reply error_reply(const ApiError& e) { return Reply{e.status, e.to_json().dump(), nullptr}; }

Reply run_to_end(ServerContext& ctx, Generation& gen, const ChatRequest& r, const ClientGone& gone) {
    std::vector<ChatChoice> choices;
    for (size_t i = 0; i < gen.n_choices(); ++i) choices.emplace_back(r.thinking);
    std::vector<GeneratedToken> prompt_logprobs;  // the first choice's (every choice has the same prompt)
    while (!gen.done()) {
        if (gone()) {
            gen.cancel();
            ++ctx.counters.client_disconnects;
            return error_reply(ApiError{499, "client closed the connection", "", "client_closed"});
        }
        for (ChoiceUpdate& u : gen.poll(std::chrono::milliseconds(100))) {
            if (u.event.finished && failed(u.event.reason)) return error_reply(finish_error(u.event));
            ChatChoice& c = choices[u.choice];
            if (u.choice == 0)
                prompt_logprobs.insert(prompt_logprobs.end(), u.event.prompt_logprobs.begin(),
                                       u.event.prompt_logprobs.end());
            apply_event(c, u.event);
            if (r.p.sampling.logprobs)
                for (json& e : chat_logprob_entries(ctx.engine.tokenizer(), u.event.tokens))
                    c.logprobs.push_back(std::move(e));
        }
    }
    json out = {{"id", make_id("chatcmpl")},
                {"object", "chat.completion"},
                {"created", unix_time()},
                {"model", ctx.model_name}};
    int64_t completion = 0;
    json arr = json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
        ChatChoice& c = choices[i];
        json msg = {{"role", "assistant"}};
        msg["content"] = c.content.empty() && !c.tool_calls.empty() ? json(nullptr) : json(c.content);
        if (r.thinking || !c.reasoning.empty()) msg["reasoning_content"] = c.reasoning;
        if (!c.tool_calls.empty()) msg["tool_calls"] = c.tool_calls;
        json lp = r.p.sampling.logprobs ? json{{"content", c.logprobs}} : json(nullptr);
        arr.push_back(json{{"index", i},
                           {"message", msg},
                           {"logprobs", lp},
                           {"finish_reason", api_finish_reason(c.reason, !c.tool_calls.empty())}});
        completion += c.completion_tokens;
    }
    out["choices"] = arr;
    out["usage"] = usage_json(gen.prompt_tokens(), completion, gen.cached_tokens());
    if (r.p.prompt_logprobs)
        out["prompt_logprobs"] =
            prompt_logprobs_json(ctx.engine.tokenizer(), prompt_logprobs, *r.p.prompt_logprobs);
    return Reply{200, out.dump(-1, ' ', false, json::error_handler_t::replace), nullptr, gen.usage()};
}

}  // namespace

ApiResult<std::vector<int32_t>> chat_prompt_ids(const ServerContext& ctx, const ChatRequest& r) {
    if (r.p.model != ctx.model_name)
        return ApiError{
            404,
            fmt::format("the model '{}' does not exist; this server serves '{}'", r.p.model, ctx.model_name),
            "model", "model_not_found"};
    const Tokenizer* tok = ctx.engine.tokenizer();
    if (!tok)
        return bad_request("this model has no tokenizer: use /v1/completions with token-id prompts",
                           "messages");
    ChatOptions opts;
    opts.thinking = r.thinking;
    opts.reasoning_effort = r.reasoning_effort;
    opts.tools = r.tools;
    opts.split_special_tokens = ctx.opt.split_special_tokens;
    auto prompt = encode_chat_prompt(r.messages, opts);
    if (!prompt) return bad_request(prompt.error().message, "messages");
    return tok->encode(prompt->text, false, prompt->plain);
}

ApiResult<Generation> start_chat(ServerContext& ctx, const ChatRequest& r) {
    auto ids = chat_prompt_ids(ctx, r);
    if (auto* e = std::get_if<ApiError>(&ids)) return *e;
    std::vector<std::vector<int32_t>> prompts{std::move(std::get<std::vector<int32_t>>(ids))};
    CommonParams p = r.p;
    if (r.tool_demand) {
        auto grammar = dsml_tool_call_grammar(r.tools, *r.tool_demand);
        if (!grammar) return bad_request(grammar.error().message, "tool_choice");
        p.constraint.kind = OutputConstraint::Kind::kStructuralTag;
        p.constraint.structural_tag = std::move(*grammar);
    }
    // The reasoning is free text: the answer after it is what the constraint holds.
    if (r.thinking && p.constraint.kind != OutputConstraint::Kind::kNone)
        if (auto end = ctx.engine.tokenizer()->token_id("</think>")) p.constraint.after_token = *end;
    return Generation::start(ctx, p, prompts);
}

Reply handle_chat(ServerContext& ctx, const std::string& body, const ClientGone& gone) {
    auto parsed = parse_chat_request(body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return error_reply(*e);
    ChatRequest& r = std::get<ChatRequest>(parsed);
    auto gen = start_chat(ctx, r);
    if (auto* e = std::get_if<ApiError>(&gen)) return error_reply(*e);
    Generation& g = std::get<Generation>(gen);
    if (r.p.stream) return Reply{200, {}, std::make_unique<ChatStream>(ctx, std::move(g), r)};
    return run_to_end(ctx, g, r, gone);
}

}  // namespace di::server
