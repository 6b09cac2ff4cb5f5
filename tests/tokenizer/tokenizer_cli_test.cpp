// `deepinfer tokenize` / `detokenize` through the real binary.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace di {
namespace {

std::string run(const std::string& args, int* status) {
    std::string out;
    FILE* p = popen((std::string(DI_BINARY) + " " + args + " 2>&1").c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    *status = pclose(p);
    return out;
}

TEST(TokenizerCli, TokenizeAndDetokenize) {
    int status = 0;
    const std::string dir = test::tokenizer_dir();
    std::string out = run("tokenize --tokenizer " + dir + " --text 'Hello! 毕老师！<think>'", &status);
    ASSERT_EQ(status, 0) << out;
    const auto ids = nlohmann::json::parse(out).get<std::vector<int32_t>>();
    EXPECT_EQ(ids, test::v4_tokenizer().encode("Hello! 毕老师！<think>"));
    out = run("tokenize --tokenizer " + dir + "/tokenizer.json --text 'Hello!' --output tokens", &status);
    EXPECT_EQ(nlohmann::json::parse(out), nlohmann::json::parse(R"(["Hello", "!"])"));
    out = run("detokenize --tokenizer " + dir + " --tokens '[19923, 3, 128821]'", &status);
    ASSERT_EQ(status, 0);
    EXPECT_EQ(out, "Hello!<think>\n");
    out = run("detokenize --tokenizer " + dir + " --tokens 19923,3", &status);
    EXPECT_EQ(out, "Hello!\n");
}

TEST(TokenizerCli, ErrorsAreOneLine) {
    int status = 0;
    std::string out = run("tokenize --tokenizer /nonexistent --text x", &status);
    EXPECT_NE(status, 0);
    EXPECT_NE(out.find("/nonexistent"), std::string::npos);
    out = run("detokenize --tokenizer " + test::tokenizer_dir() + " --tokens '1, 999999999'", &status);
    EXPECT_NE(status, 0);
    EXPECT_NE(out.find("999999999"), std::string::npos);
    out = run("detokenize --tokenizer " + test::tokenizer_dir() + " --tokens 'a,b'", &status);
    EXPECT_NE(status, 0);
}

// Raw bytes that are not UTF-8 are refused with their offset, never replaced silently; a directory is not
// a text file; special-token text is a special token unless --split-special-tokens asks otherwise.
TEST(TokenizerCli, InvalidUtf8DirectoriesAndSpecialTokenText) {
    int status = 0;
    const std::string dir = test::tokenizer_dir();
    const std::string file = testing::TempDir() + "/di_bad_utf8.txt";
    {
        FILE* f = std::fopen(file.c_str(), "wb");
        std::fwrite("ok \xff\xfe tail", 1, 10, f);
        std::fclose(f);
    }
    std::string out = run("tokenize --tokenizer " + dir + " --text-file " + file, &status);
    EXPECT_NE(status, 0) << out;
    EXPECT_NE(out.find("is not valid UTF-8 at byte 3 (0xff)"), std::string::npos) << out;
    out = run("tokenize --tokenizer " + dir + " --text-file " + testing::TempDir(), &status);
    EXPECT_NE(status, 0) << out;
    EXPECT_NE(out.find("is not a regular file"), std::string::npos) << out;
    out = run("tokenize --tokenizer " + dir + " --text 'a<think>b'", &status);
    ASSERT_EQ(status, 0) << out;
    const auto with_special = nlohmann::json::parse(out).get<std::vector<int32_t>>();
    EXPECT_NE(std::find(with_special.begin(), with_special.end(), 128821), with_special.end()) << out;
    out = run("tokenize --tokenizer " + dir + " --text 'a<think>b' --split-special-tokens", &status);
    ASSERT_EQ(status, 0) << out;
    const auto split = nlohmann::json::parse(out).get<std::vector<int32_t>>();
    EXPECT_EQ(std::find(split.begin(), split.end(), 128821), split.end()) << out;
    auto text = test::v4_tokenizer().decode(split);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, "a<think>b");  // the same text, as ordinary tokens
}

}  // namespace
}  // namespace di
