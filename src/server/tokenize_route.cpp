// POST /tokenize and /detokenize (the shapes vLLM serves):
//   /tokenize   {"model", "prompt": TEXT[, "add_special_tokens": bool]} or a chat request's
//               {"model", "messages", "tools", ...} -> {"tokens": [ids], "count": n, "max_model_len": ctx}
//   /detokenize {"model", "tokens": [ids]} -> {"prompt": TEXT}
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "io/json_text.h"
#include "server/chat_prompt.h"

namespace di::server {
namespace {

using json = nlohmann::json;

Reply error_reply(const ApiError& e) { return Reply{e.status, e.to_json().dump(), nullptr}; }

ApiResult<json> parse_object(const std::string& body) {
    if (io::json_nesting_depth(body) > io::kMaxJsonDepth)
        return bad_request(
            fmt::format("the request body nests JSON deeper than {} levels", io::kMaxJsonDepth), "",
            "invalid_json");
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object())
        return bad_request("the request body must be a JSON object", "", "invalid_json");
    return j;
}

std::optional<ApiError> check_model(const ServerContext& ctx, const json& j) {
    if (!j.contains("model")) return std::nullopt;  // optional here, as in vLLM
    if (!j["model"].is_string()) return bad_request("'model' must be a string", "model");
    if (j["model"].get<std::string>() != ctx.model_name)
        return ApiError{404,
                        fmt::format("the model '{}' does not exist; this server serves '{}'",
                                    j["model"].get<std::string>(), ctx.model_name),
                        "model", "model_not_found"};
    return std::nullopt;
}

}  // namespace

Reply handle_tokenize(ServerContext& ctx, const std::string& body) {
    auto parsed = parse_object(body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return error_reply(*e);
    const json& j = std::get<json>(parsed);
    std::vector<int32_t> ids;
    if (j.contains("messages")) {  // the chat prompt, exactly as /v1/chat/completions would encode it
        auto r = parse_chat_request(body);
        if (auto* e = std::get_if<ApiError>(&r)) return error_reply(*e);
        auto p = chat_prompt_ids(ctx, std::get<ChatRequest>(r));
        if (auto* e = std::get_if<ApiError>(&p)) return error_reply(*e);
        ids = std::move(std::get<std::vector<int32_t>>(p));
    } else {
        if (auto e = check_model(ctx, j)) return error_reply(*e);
        for (const auto& [k, v] : j.items())
            if (k != "model" && k != "prompt" && k != "add_special_tokens")
                return error_reply(bad_request(fmt::format("unknown field '{}'", k), k));
        if (!j.contains("prompt") || !j["prompt"].is_string())
            return error_reply(bad_request("'prompt' (a string) or 'messages' is required", "prompt"));
        bool special = true;
        if (j.contains("add_special_tokens")) {
            if (!j["add_special_tokens"].is_boolean())
                return error_reply(
                    bad_request("'add_special_tokens' must be a boolean", "add_special_tokens"));
            special = j["add_special_tokens"].get<bool>();
        }
        const Tokenizer* tok = ctx.engine.tokenizer();
        if (!tok) return error_reply(bad_request("this model has no tokenizer", "prompt"));
        const std::string text = j["prompt"].get<std::string>();
        ids = special ? tok->encode(text) : tok->encode(text, false);
    }
    const json out = {
        {"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.engine.info().max_context}};
    return Reply{200, out.dump(), nullptr};
}

Reply handle_detokenize(ServerContext& ctx, const std::string& body) {
    auto parsed = parse_object(body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return error_reply(*e);
    const json& j = std::get<json>(parsed);
    if (auto e = check_model(ctx, j)) return error_reply(*e);
    for (const auto& [k, v] : j.items())
        if (k != "model" && k != "tokens")
            return error_reply(bad_request(fmt::format("unknown field '{}'", k), k));
    if (!j.contains("tokens") || !j["tokens"].is_array())
        return error_reply(bad_request("'tokens' (an array of token ids) is required", "tokens"));
    std::vector<int32_t> ids;
    for (const json& t : j["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < INT32_MIN || t.get<int64_t>() > INT32_MAX)
            return error_reply(bad_request("'tokens' must be an array of integer token ids", "tokens"));
        ids.push_back(int32_t(t.get<int64_t>()));
    }
    const Tokenizer* tok = ctx.engine.tokenizer();
    if (!tok) return error_reply(bad_request("this model has no tokenizer", "tokens"));
    auto text = tok->decode(ids);
    if (!text) return error_reply(bad_request(text.error().message, "tokens"));
    return Reply{200, json{{"prompt", *text}}.dump(-1, ' ', false, json::error_handler_t::replace), nullptr};
}

}  // namespace di::server
