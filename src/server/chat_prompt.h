// A chat request's prompt as token ids (V4 chat encoding, the server's --split-special-tokens, the model
// check): shared by /v1/chat/completions, /v1/messages and /tokenize.
#pragma once

#include <vector>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/openai_request.h"
#include "server/server_context.h"

namespace di::server {

ApiResult<std::vector<int32_t>> chat_prompt_ids(const ServerContext& ctx, const ChatRequest& r);
// The request's prompt encoded and submitted (the chat routes' common start).
ApiResult<Generation> start_chat(ServerContext& ctx, const ChatRequest& r);

}  // namespace di::server
