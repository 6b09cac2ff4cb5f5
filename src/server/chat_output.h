// One chat choice's output as it streams: engine text -> ChatOutputParser -> OpenAI message fields
// (content, reasoning_content, tool_calls). apply_event() returns the delta a streaming client receives;
// the accumulated fields make the non-streaming message.
#pragma once

#include <nlohmann/json.hpp>

#include "deepinfer/request.h"
#include "deepinfer/tokenizer.h"

namespace di::server {

struct ChatChoice {
    ChatOutputParser parser;
    std::string content, reasoning;
    nlohmann::json tool_calls = nlohmann::json::array();  // [{id, type, function: {name, arguments}}]
    nlohmann::json logprobs = nlohmann::json::array();
    FinishReason reason = FinishReason::kNone;
    int64_t completion_tokens = 0;
    explicit ChatChoice(bool thinking) : parser(thinking) {}
};

// Folds one engine event into the choice; returns the delta it adds ({} when nothing visible). A tool call
// streams as OpenAI's do: {index, id, type, function: {name, arguments: ""}} first, then {index, function:
// {arguments: piece}} deltas whose pieces join into the arguments.
nlohmann::json apply_event(ChatChoice& c, const RequestEvent& e);

}  // namespace di::server
