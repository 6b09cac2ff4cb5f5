// POST /v1/completions: raw prompts (text or token ids) -> engine -> text, whole or as server-sent events.
#include <fmt/format.h>

#include "server/generation.h"
#include "server/openai_response.h"
#include "server/server_context.h"

namespace di::server {
namespace {

struct TextChoice {
    std::string text;
    json logprobs = empty_completion_logprobs();
    int64_t text_offset = 0;
    FinishReason reason = FinishReason::kNone;
    int64_t completion_tokens = 0;
    std::vector<GeneratedToken> prompt_logprobs;  // the engine's, for vLLM's prompt_logprobs
};

bool failed(FinishReason r) { return r != FinishReason::kStop && r != FinishReason::kLength; }

Reply error_reply(const ApiError& e) { return Reply{e.status, e.to_json().dump(), nullptr}; }

class CompletionStream : public SseProducer {
  public:
    CompletionStream(ServerContext& ctx, Generation gen, const CompletionRequest& r)
        : ctx_(ctx),
          gen_(std::move(gen)),
          choices_(gen_.n_choices()),
          id_(make_id("cmpl")),
          created_(unix_time()),
          logprobs_(r.p.sampling.logprobs),
          include_usage_(r.p.include_usage) {
        ++ctx_.counters.streams_open;
    }
    ~CompletionStream() override { --ctx_.counters.streams_open; }

    RequestUsage usage() const override { return gen_.usage(); }

    bool pump(std::string& out, std::chrono::milliseconds wait) override {
        if (done_) return false;
        for (ChoiceUpdate& u : gen_.poll(wait)) {
            TextChoice& c = choices_[u.choice];
            if (u.event.finished && failed(u.event.reason)) {
                gen_.cancel();
                out += sse(finish_error(u.event).to_json());
                return finish(out);
            }
            c.completion_tokens = u.event.completion_tokens;
            json lp = nullptr;
            if (logprobs_) {
                lp = empty_completion_logprobs();
                append_completion_logprobs(lp, ctx_.engine.tokenizer(), u.event.tokens, c.text_offset);
            }
            json reason = nullptr;
            if (u.event.finished) reason = api_finish_reason(u.event.reason, false);
            json j = base();
            j["choices"] = json::array({json{
                {"index", u.choice}, {"text", u.event.text}, {"logprobs", lp}, {"finish_reason", reason}}});
            if (include_usage_) j["usage"] = nullptr;
            out += sse(j);
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
        return json{
            {"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", ctx_.model_name}};
    }

    ServerContext& ctx_;
    Generation gen_;
    std::vector<TextChoice> choices_;
    std::string id_;
    int64_t created_;
    bool logprobs_, include_usage_;
    bool done_ = false;
};

// echo: each choice starts with its prompt's text, and with logprobs its prompt tokens' entries (the first
// token has none: null, as OpenAI's; the rest come with the engine's prompt logprobs).
void start_with_prompts(std::vector<TextChoice>& choices, const Tokenizer* tok,
                        const std::vector<std::vector<int32_t>>& prompts,
                        const std::vector<std::string>& texts, bool logprobs) {
    const size_t per_prompt = choices.size() / prompts.size();
    for (size_t i = 0; i < choices.size(); ++i) {
        const size_t p = i / per_prompt;
        TextChoice& c = choices[i];
        if (p < texts.size()) {
            c.text = texts[p];
        } else if (tok) {
            auto text = tok->decode(prompts[p]);
            c.text = text ? *text : std::string();
        }
        if (!logprobs) continue;
        const std::string piece = token_piece(tok, prompts[p][0]);
        c.logprobs["tokens"].push_back(piece);
        c.logprobs["token_logprobs"].push_back(nullptr);
        c.logprobs["top_logprobs"].push_back(nullptr);
        c.logprobs["text_offset"].push_back(0);
        // a BOS the text does not show takes no room in it
        c.text_offset = c.text.compare(0, piece.size(), piece) == 0 ? int64_t(piece.size()) : 0;
    }
}

Reply run_to_end(ServerContext& ctx, Generation& gen, const CompletionRequest& r,
                 const std::vector<std::vector<int32_t>>& prompts, const ClientGone& gone) {
    std::vector<TextChoice> choices(gen.n_choices());
    if (r.p.echo)
        start_with_prompts(choices, ctx.engine.tokenizer(), prompts, r.prompt_texts, r.p.sampling.logprobs);
    while (!gen.done()) {
        if (gone()) {
            gen.cancel();
            ++ctx.counters.client_disconnects;
            return error_reply(ApiError{499, "client closed the connection", "", "client_closed"});
        }
        for (ChoiceUpdate& u : gen.poll(std::chrono::milliseconds(100))) {
            if (u.event.finished && failed(u.event.reason)) return error_reply(finish_error(u.event));
            TextChoice& c = choices[u.choice];
            c.text += u.event.text;
            c.completion_tokens = u.event.completion_tokens;
            if (u.event.finished) c.reason = u.event.reason;
            c.prompt_logprobs.insert(c.prompt_logprobs.end(), u.event.prompt_logprobs.begin(),
                                     u.event.prompt_logprobs.end());
            if (r.p.sampling.logprobs) {
                if (r.p.echo) {  // as many alternatives as logprobs asks (prompt_logprobs may ask more)
                    std::vector<GeneratedToken> echoed = u.event.prompt_logprobs;
                    for (GeneratedToken& t : echoed)
                        if (t.top.size() > size_t(r.p.sampling.top_logprobs))
                            t.top.resize(size_t(r.p.sampling.top_logprobs));
                    append_completion_logprobs(c.logprobs, ctx.engine.tokenizer(), echoed, c.text_offset);
                }
                append_completion_logprobs(c.logprobs, ctx.engine.tokenizer(), u.event.tokens, c.text_offset);
            }
        }
    }
    json arr = json::array();
    int64_t completion = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
        const TextChoice& c = choices[i];
        arr.push_back(json{{"index", i},
                           {"text", c.text},
                           {"logprobs", r.p.sampling.logprobs ? c.logprobs : json(nullptr)},
                           {"finish_reason", api_finish_reason(c.reason, false)}});
        if (r.p.prompt_logprobs)
            arr.back()["prompt_logprobs"] =
                prompt_logprobs_json(ctx.engine.tokenizer(), c.prompt_logprobs, *r.p.prompt_logprobs);
        completion += c.completion_tokens;
    }
    json out = {{"id", make_id("cmpl")},
                {"object", "text_completion"},
                {"created", unix_time()},
                {"model", ctx.model_name},
                {"choices", arr},
                {"usage", usage_json(gen.prompt_tokens(), completion, gen.cached_tokens())}};
    return Reply{200, out.dump(-1, ' ', false, json::error_handler_t::replace), nullptr, gen.usage()};
}

}  // namespace

Reply handle_completion(ServerContext& ctx, const std::string& body, const ClientGone& gone) {
    auto parsed = parse_completion_request(body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return error_reply(*e);
    CompletionRequest& r = std::get<CompletionRequest>(parsed);
    if (r.p.model != ctx.model_name)
        return error_reply(ApiError{
            404,
            fmt::format("the model '{}' does not exist; this server serves '{}'", r.p.model, ctx.model_name),
            "model", "model_not_found"});
    const Tokenizer* tok = ctx.engine.tokenizer();
    std::vector<std::vector<int32_t>> prompts = r.prompt_token_ids;
    if (!r.prompt_texts.empty() && !tok)
        return error_reply(
            bad_request("this model has no tokenizer: give the prompt as token ids", "prompt"));
    for (const auto& t : r.prompt_texts) prompts.push_back(tok->encode(t));
    auto gen = Generation::start(ctx, r.p, prompts);
    if (auto* e = std::get_if<ApiError>(&gen)) return error_reply(*e);
    Generation& g = std::get<Generation>(gen);
    if (r.p.stream) return Reply{200, {}, std::make_unique<CompletionStream>(ctx, std::move(g), r)};
    return run_to_end(ctx, g, r, prompts, gone);
}

}  // namespace di::server
