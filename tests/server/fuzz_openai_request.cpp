// libFuzzer entry for the OpenAI and Anthropic request parsers (built with -DDEEPINFER_FUZZ=ON and clang).
// The same function runs in protocol_test.cpp over a deterministic mutation corpus, so every build exercises
// it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/anthropic_request.h"
#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    (void)di::server::parse_chat_request(body);
    (void)di::server::parse_completion_request(body);
    (void)di::server::parse_messages_request(body);
    return 0;
}
