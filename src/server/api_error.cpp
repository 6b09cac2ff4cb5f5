#include "server/api_error.h"

#include <string_view>

namespace di::server {

std::string ApiError::type() const {
    switch (status) {
        case 401:
            return "authentication_error";
        case 404:
            return "not_found_error";
        case 408:
        case 504:
            return "timeout_error";
        case 413:
            return "invalid_request_error";
        case 429:
            return "rate_limit_error";
        case 503:
            return "service_unavailable_error";
        default:
            return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

nlohmann::json ApiError::to_json() const {
    nlohmann::json e = {{"message", message}, {"type", type()}, {"param", nullptr}, {"code", nullptr}};
    if (!param.empty()) e["param"] = param;
    if (!code.empty()) e["code"] = code;
    return nlohmann::json{{"error", e}};
}

nlohmann::json ApiError::to_anthropic_json() const {
    const char* t = "api_error";
    switch (status) {
        case 400:
            t = "invalid_request_error";
            break;
        case 401:
            t = "authentication_error";
            break;
        case 403:
            t = "permission_error";
            break;
        case 404:
            t = "not_found_error";
            break;
        case 413:
            t = "request_too_large";
            break;
        case 429:
            t = "rate_limit_error";
            break;
        case 503:
        case 529:
            t = "overloaded_error";
            break;
        default:
            t = status < 500 ? "invalid_request_error" : "api_error";
    }
    return nlohmann::json{{"type", "error"}, {"error", {{"type", t}, {"message", message}}}};
}

ApiError bad_request(std::string message, std::string param, std::string code) {
    // Messages quote request values (a role, a tool name): one line, bounded, whatever those hold.
    return ApiError{400, quote_line(message, 2000), std::move(param), std::move(code)};
}

namespace {
// The message starts with the field's name as a whole word ("prompt: ..." but not "prompt_logprobs ...").
bool names_field(std::string_view message, std::string_view field) {
    if (message.substr(0, field.size()) != field) return false;
    const char next = message.size() > field.size() ? message[field.size()] : ' ';
    return !(next == '_' || (next >= 'a' && next <= 'z'));
}
}  // namespace

ApiError from_engine_error(const Error& e) {
    switch (e.code) {
        case ErrorCode::kCapacity:
            return ApiError{429, e.message, "", "queue_full"};
        case ErrorCode::kUnsupported:
            return ApiError{503, e.message, "", "unavailable"};
        case ErrorCode::kOutOfRange:
            return ApiError{400, e.message, "messages", "context_length_exceeded"};
        default:  // the engine names the request field a message is about by starting with it
            for (std::string_view field :
                 {"response_format", "tool_choice", "prompt", "prompt_logprobs", "stop_token_ids"})
                if (names_field(e.message, field)) return ApiError{400, e.message, std::string(field), ""};
            return ApiError{400, e.message, "", ""};
    }
}

}  // namespace di::server
