// libFuzzer: tokenizer.json parsing must return a value or an Error, never crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenizer/tokenizer_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    auto m = di::tok::parse_tokenizer_json(text, "fuzz");
    if (m.ok()) (void)di::tok::apply_tokenizer_config(m.value(), text, "fuzz");
    return 0;
}
