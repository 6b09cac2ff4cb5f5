// libFuzzer: the output parser takes any text in any chunking; first byte picks mode and chunk size.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "deepinfer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    di::ChatOutputParser parser((data[0] & 1) != 0);
    const size_t chunk = 1 + (data[0] >> 1);
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    for (size_t i = 0; i < text.size(); i += chunk) parser.push(text.substr(i, chunk));
    parser.finish();
    return 0;
}
