// Replays the committed fuzz corpus (tests/fuzz/corpus) through parse_safetensors: `ok_*` files must parse,
// `bad_*` files must be rejected with a one-line message, anything else (saved fuzzer finds) must just not
// crash. Every prefix of every file is parsed too, which covers truncation at each byte.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace di::io {
namespace {

TEST(SafetensorsCorpus, Replay) {
    const std::filesystem::path dir = std::filesystem::path(DI_SOURCE_DIR) / "tests" / "fuzz" / "corpus";
    int n_ok = 0, n_bad = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        const std::string bytes = test::read_bytes(entry.path().string());
        const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
        auto r = parse_safetensors(data, bytes.size(), name);
        if (name.rfind("ok_", 0) == 0) {
            EXPECT_TRUE(r.ok()) << name << ": " << r.error().message;
            ++n_ok;
        } else if (name.rfind("bad_", 0) == 0) {
            ASSERT_FALSE(r.ok()) << name << " parsed but should not";
            EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
            EXPECT_EQ(r.error().message.rfind(name, 0), 0u) << r.error().message;
            ++n_bad;
        }
        for (size_t i = 0; r.ok() && i < r->size(); ++i) {  // every range must lie inside the buffer
            EXPECT_GE((*r)[i].data, data + 8) << name;
            EXPECT_LE((*r)[i].data + (*r)[i].nbytes, data + bytes.size()) << name;
        }
        for (size_t len = 0; len < bytes.size(); ++len) {
            std::vector<uint8_t> prefix(data, data + len);  // own allocation so ASan sees overreads
            auto p = parse_safetensors(prefix.data(), len, name);
            if (!p.ok()) continue;
            for (const auto& t : *p)
                EXPECT_LE(t.data + t.nbytes, prefix.data() + len) << name << " prefix " << len;
        }
    }
    EXPECT_GE(n_ok, 3);
    EXPECT_GE(n_bad, 10);
}

}  // namespace
}  // namespace di::io
