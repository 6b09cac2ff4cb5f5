// libFuzzer: encode arbitrary bytes with the V4 tokenizer; decoding must give the sanitized input back.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "deepinfer/tokenizer.h"
#include "tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const di::Tokenizer tok =
        di::Tokenizer::load(std::string(DI_SOURCE_DIR) + "/assets/tokenizer").value();
    const std::string text(reinterpret_cast<const char*>(data), size);
    const auto ids = tok.encode(text, false);
    if (tok.decode(ids).value() != di::tok::utf8_sanitize(text)) std::abort();
    return 0;
}
