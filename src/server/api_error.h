// OpenAI-style API errors: {"error": {"message", "type", "param", "code"}} with an HTTP status.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>

#include "core/error.h"

namespace di::server {

struct ApiError {
    int status = 400;
    std::string message;
    std::string param;         // the offending request field, "" for none
    std::string code;          // machine-readable, "" for none
    std::string type() const;  // "invalid_request_error", "not_found_error", "rate_limit_error", ...
    nlohmann::json to_json() const;
    // Anthropic's shape: {"type": "error", "error": {"type", "message"}} (/v1/messages).
    nlohmann::json to_anthropic_json() const;
};

// A 400; the message is made one line of at most 2,000 bytes (quote_line: it quotes request values).
ApiError bad_request(std::string message, std::string param = {}, std::string code = {});

// Maps an engine/runtime Error: kCapacity -> 429, kUnsupported (engine stopping) -> 503, others -> 400.
ApiError from_engine_error(const Error& e);

// A parsed value or the error that rejects the request.
template <typename T>
using ApiResult = std::variant<T, ApiError>;

}  // namespace di::server
