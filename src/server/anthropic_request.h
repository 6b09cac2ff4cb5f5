// Parsing of Anthropic Messages request bodies (POST /v1/messages) into the chat request the OpenAI route
// runs: system, messages with text / thinking / tool_use / tool_result blocks, tools with input_schema,
// tool_choice, thinking, stop_sequences. A field this server does not implement is refused with a 400
// naming it.
#pragma once

#include <string_view>

#include "server/openai_request.h"

namespace di::server {

ApiResult<ChatRequest> parse_messages_request(std::string_view body);

}  // namespace di::server
