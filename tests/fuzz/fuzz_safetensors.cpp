// libFuzzer entry for parse_safetensors: any input must either parse into ranges inside the buffer or give
// a one-line error; ASan/UBSan flag any out-of-bounds read or overflow on the way.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto r = di::io::parse_safetensors(data, size, "fuzz.safetensors");
    if (!r.ok()) {
        if (r.error().message.find('\n') != std::string::npos) {
            std::fprintf(stderr, "multi-line error: %s\n", r.error().message.c_str());
            std::abort();
        }
        return 0;
    }
    volatile uint8_t sink = 0;
    for (const auto& t : *r) {
        if (t.data < data + 8 || t.nbytes > size || t.data + t.nbytes > data + size) std::abort();
        if (t.nbytes > 0) sink = sink ^ t.data[0] ^ t.data[t.nbytes - 1];  // ASan checks both ends
    }
    return 0;
}
