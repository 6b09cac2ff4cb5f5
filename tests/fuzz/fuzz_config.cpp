// libFuzzer entry for parse_config (+ rope_freqs on what parses): errors must be one line, nothing may crash.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    auto r = di::model::parse_config(text, "fuzz/config.json");
    if (!r.ok()) {
        if (r.error().message.find('\n') != std::string::npos) {
            std::fprintf(stderr, "multi-line error: %s\n", r.error().message.c_str());
            std::abort();
        }
        return 0;
    }
    if (r->rope_dim > 4096) return 0;  // keep each run cheap; sizes are otherwise unbounded
    for (const auto* t : {&r->rope_main, &r->rope_compress}) {
        const auto f = di::model::rope_freqs(*t, r->rope_dim, r->max_position_embeddings);
        if (f.inv_freq.size() != size_t(r->rope_dim / 2)) std::abort();
    }
    for (int i = 0; i < int(r->n_layers) && i < 1024; ++i) (void)r->compress_rate(i);
    return 0;
}
