// A chat request's prompt as token ids (V4 chat encoding, the server's --split-special-tokens, the model
// check): shared by /v1/chat/completions and /tokenize.
#pragma once

#include <vector>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/server_context.h"

namespace di::server {

ApiResult<std::vector<int32_t>> chat_prompt_ids(const ServerContext& ctx, const ChatRequest& r);

}  // namespace di::server
