// End-to-end check on 4 MiB of mixed text (the corpus inputs concatenated in the pseudo-random order of
// tools/tokenizer_make_corpus.py build_mixed_text): id count and FNV-1a-64 of the ids must equal the
// oracle's (Hugging Face tokenizers), and decoding must give the text back.
#include <chrono>
#include <nlohmann/json.hpp>

#include "test_paths.h"
#include "tokenizer/utf8.h"

namespace di {
namespace {

std::string build_mixed_text(size_t target) {
    std::vector<std::string> inputs;
    std::istringstream lines(test::read_text_file(test::tokenizer_data("corpus.jsonl")));
    std::string line;
    while (std::getline(lines, line)) {
        auto j = nlohmann::json::parse(line);
        inputs.push_back(j.contains("hex") ? test::from_hex(j["hex"].get<std::string>())
                                           : j["text"].get<std::string>());
    }
    std::string out;
    uint64_t state = 12345;
    while (out.size() < target) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        out += inputs[(state >> 33) % inputs.size()];
    }
    out.resize(target);
    return out;
}

uint64_t fnv1a64(const std::vector<int32_t>& ids) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int32_t id : ids)
        for (int b = 0; b < 4; ++b) {
            h ^= (static_cast<uint32_t>(id) >> (8 * b)) & 0xFF;
            h *= 0x100000001b3ULL;
        }
    return h;
}

TEST(TokenizerMixedText, FourMegabytesMatchOracle) {
    const auto meta = nlohmann::json::parse(test::read_text_file(test::tokenizer_data("mixed_text.json")));
    const std::string text = build_mixed_text(meta["bytes"].get<size_t>());
    const Tokenizer& tok = test::v4_tokenizer();
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok.encode(text, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("encoded %zu bytes into %zu ids in %.3f s (%.1f MB/s)\n", text.size(), ids.size(), s,
                text.size() / s / 1e6);
    const auto first = meta["first_ids"].get<std::vector<int32_t>>();
    ASSERT_GE(ids.size(), first.size());
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(first.size())),
              first);
    EXPECT_EQ(ids.size(), meta["n_ids"].get<size_t>());
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(fnv1a64(ids)));
    EXPECT_EQ(std::string(hex), meta["fnv1a64"].get<std::string>());
    EXPECT_EQ(tok.decode(ids).value(), tok::utf8_sanitize(text));
}

}  // namespace
}  // namespace di
