// Replays the committed config fuzz corpus (tests/fuzz/corpus_config) through parse_config: `ok_*` must
// parse, `bad_*` must fail with a one-line error naming the file; every prefix of every file is parsed too.
#include <gtest/gtest.h>

#include <filesystem>

#include "io_test_util.h"
#include "model/config.h"

namespace di::model {
namespace {

TEST(ConfigCorpus, Replay) {
    const std::filesystem::path dir =
        std::filesystem::path(DI_SOURCE_DIR) / "tests" / "fuzz" / "corpus_config";
    int n_ok = 0, n_bad = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        const std::string text = test::read_bytes(entry.path().string());
        auto r = parse_config(text, name);
        if (name.rfind("ok_", 0) == 0) {
            EXPECT_TRUE(r.ok()) << name << ": " << r.error().message;
            ++n_ok;
        } else if (name.rfind("bad_", 0) == 0) {
            ASSERT_FALSE(r.ok()) << name << " parsed but should not";
            ++n_bad;
        }
        if (!r.ok()) {
            EXPECT_EQ(r.error().message.rfind(name + ": ", 0), 0u) << r.error().message;
            EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
        }
        for (size_t len = 0; len < text.size(); len += 7) {
            auto p = parse_config(text.substr(0, len), name);
            if (p.ok()) continue;
            EXPECT_EQ(p.error().message.find('\n'), std::string::npos) << p.error().message;
        }
    }
    EXPECT_GE(n_ok, 10);
    EXPECT_GE(n_bad, 20);
}

}  // namespace
}  // namespace di::model
