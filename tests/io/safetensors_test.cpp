// parse_safetensors on hand-built headers: the valid layouts and every malformed case, each error checked for
// the file, the tensor/field and the offending value.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <initializer_list>

#include "io_test_util.h"

namespace di::io {
namespace {

using test::make_safetensors;

const std::string kPath = "mem/model.safetensors";

Result<std::vector<TensorEntry>> parse(const std::string& bytes) {
    return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), kPath);
}

void expect_error(const std::string& bytes, std::initializer_list<std::string> parts) {
    auto r = parse(bytes);
    ASSERT_FALSE(r.ok()) << "expected an error mentioning " << *parts.begin();
    const std::string& msg = r.error().message;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(kPath), std::string::npos) << msg;
    for (const auto& p : parts)
        EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
}

std::string one(const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"t":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
}

TEST(Safetensors, ParsesTwoTensorsAndMetadata) {
    const std::string header =
        R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I8","shape":[3],"data_offsets":[8,11]},)"
        R"("a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})";
    const std::string bytes = make_safetensors(header, std::string("ABCDEFGHxyz"));
    auto r = parse(bytes);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->size(), 2u);
    const auto& a = (*r)[0].name == "a" ? (*r)[0] : (*r)[1];
    const auto& b = (*r)[0].name == "a" ? (*r)[1] : (*r)[0];
    EXPECT_EQ(a.st_dtype, "F32");
    EXPECT_EQ(a.shape, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(a.nbytes, 8u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(a.data), 8), "ABCDEFGH");
    EXPECT_EQ(b.shape, (std::vector<int64_t>{3}));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data), 3), "xyz");
    EXPECT_EQ(a.file, kPath);
}

TEST(Safetensors, AcceptsEmptyHeaderScalarsAndZeroSizeTensors) {
    EXPECT_TRUE(parse(make_safetensors("{}", "")).ok());
    EXPECT_TRUE(parse(make_safetensors("{}        ", "")).ok());  // header padded with spaces, as written
    const std::string header =
        R"({"e1":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},"e2":{"dtype":"BF16","shape":[0],)"
        R"("data_offsets":[0,0]},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})";
    auto r = parse(make_safetensors(header, "abcd"));
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->size(), 3u);
}

TEST(Safetensors, DtypeSizesAreChecked) {
    const std::pair<const char*, int> kSizes[] = {{"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I8", 1},
                                                  {"U8", 1},      {"BF16", 2},    {"F16", 2},
                                                  {"F32", 4},     {"I32", 4},     {"I64", 8}};
    for (const auto& [dt, size] : kSizes) {
        const int n = 3 * size;
        const std::string off = "[0," + std::to_string(n) + "]";
        EXPECT_TRUE(parse(make_safetensors(one(dt, "[3]", off), std::string(size_t(n), 'x'))).ok()) << dt;
        const std::string bad = "[0," + std::to_string(n - 1) + "]";
        expect_error(make_safetensors(one(dt, "[3]", bad), std::string(size_t(n - 1), 'x')),
                     {"'t'", dt, std::to_string(n - 1) + " bytes", "needs " + std::to_string(n)});
    }
}

TEST(Safetensors, Fp4ExpertsStoredAsI8HalfWidth) {
    // [out=2, in=6] FP4 -> I8 [2, 3].
    auto r = parse(make_safetensors(one("I8", "[2,3]", "[0,6]"), "012345"));
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ((*r)[0].nbytes, 6u);
}

TEST(Safetensors, ShortFiles) {
    expect_error("", {"0 bytes", "too short"});
    expect_error(std::string("\x05\0\0", 3), {"3 bytes"});
}

TEST(Safetensors, HeaderLongerThanFile) {
    expect_error(make_safetensors("{}", "", 1000), {"header length 1000", "exceeds", "2 bytes"});
    expect_error(make_safetensors("{}", "", uint64_t(1) << 40), {"header length 1099511627776", "limit"});
    expect_error(make_safetensors("{}", "", UINT64_MAX - 1), {"header length 18446744073709551614"});
}

TEST(Safetensors, TruncatedFile) {
    const std::string good = make_safetensors(one("F32", "[4]", "[0,16]"), std::string(16, 'x'));
    ASSERT_TRUE(parse(good).ok());
    expect_error(good.substr(0, good.size() - 1), {"'t'", "[0, 16]", "15 bytes"});  // data cut
    expect_error(good.substr(0, 20), {"header length"});                            // header cut
}

TEST(Safetensors, BadJson) {
    expect_error(make_safetensors(R"({"t": [1,)", ""), {"invalid JSON"});
    expect_error(make_safetensors("[1,2]", ""), {"JSON object", "array [1,2]"});
    expect_error(make_safetensors(R"({"t": 5})", ""), {"'t'", "expected an object", "integer 5"});
    expect_error(make_safetensors("{\"\xff\": 1}", ""), {"invalid JSON"});
}

TEST(Safetensors, BadFields) {
    expect_error(make_safetensors(R"({"t":{"shape":[1],"data_offsets":[0,1]}})", "x"), {"'t'", "dtype"});
    expect_error(make_safetensors(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})", "x"),
                 {"'t'", "unknown field 'x'"});
    expect_error(make_safetensors(R"({"t":{"dtype":5,"shape":[1],"data_offsets":[0,1]}})", "x"),
                 {"'t'", "dtype", "integer 5"});
    expect_error(make_safetensors(one("Q4", "[2]", "[0,2]"), "xx"), {"'t'", "unknown dtype 'Q4'"});
    expect_error(make_safetensors(one("F32", "7", "[0,4]"), "xxxx"), {"'t'", "shape", "integer 7"});
    expect_error(make_safetensors(one("F32", "[-1]", "[0,0]"), ""), {"'t'", "shape[0]", "-1"});
    expect_error(make_safetensors(one("F32", "[1,2.5]", "[0,0]"), ""), {"'t'", "shape[1]", "2.5"});
    expect_error(make_safetensors(one("U8", "[1]", "[0]"), "x"), {"'t'", "data_offsets", "[0]"});
    expect_error(make_safetensors(one("U8", "[1]", "[0,1,2]"), "x"), {"'t'", "data_offsets"});
    expect_error(make_safetensors(one("U8", "[1]", "[-1,0]"), "x"), {"'t'", "data_offsets[0]", "-1"});
    expect_error(make_safetensors(one("U8", "[1]", "[0,\"1\"]"), "x"), {"'t'", "data_offsets[1]", "\"1\""});
}

TEST(Safetensors, LyingOffsets) {
    expect_error(make_safetensors(one("U8", "[0]", "[2,1]"), "x"), {"'t'", "[2, 1]", "begin > end"});
    expect_error(make_safetensors(one("U8", "[16]", "[0,16]"), std::string(8, 'x')),
                 {"'t'", "[0, 16]", "data section of 8 bytes"});
    expect_error(make_safetensors(one("U8", "[1]", "[18446744073709551615,18446744073709551615]"), "x"),
                 {"'t'", "18446744073709551615"});
}

TEST(Safetensors, OverlapHoleAndTrailingBytes) {
    const std::string overlap =
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    expect_error(make_safetensors(overlap, std::string(8, 'x')), {"'b'", "[4, 8]", "overlap tensor 'a'"});
    const std::string same =
        R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
    expect_error(make_safetensors(same, std::string(4, 'x')), {"overlap"});
    const std::string hole =
        R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})";
    expect_error(make_safetensors(hole, std::string(6, 'x')), {"'b'", "hole of 2 bytes", "'a'"});
    expect_error(make_safetensors(one("U8", "[2]", "[0,2]"), std::string(5, 'x')),
                 {"data section is 5 bytes", "cover only the first 2"});
}

TEST(Safetensors, NumelOverflow) {
    expect_error(make_safetensors(one("F32", "[4611686018427387904,8]", "[0,0]"), ""), {"'t'", "overflows"});
    expect_error(make_safetensors(one("I64", "[4611686018427387904]", "[0,0]"), ""), {"'t'", "overflows"});
    expect_error(make_safetensors(one("F32", "[18446744073709551615]", "[0,0]"), ""),
                 {"'t'", "shape[0]", "18446744073709551615"});
}

TEST(Safetensors, DuplicateNamesAndMetadata) {
    const std::string dup =
        R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
    expect_error(make_safetensors(dup, "xy"), {"'a'", "twice"});
    expect_error(make_safetensors(R"({"__metadata__":[1]})", ""), {"__metadata__", "array"});
    expect_error(make_safetensors(R"({"__metadata__":{"k":1}})", ""), {"__metadata__['k']", "integer 1"});
}

TEST(Safetensors, DtypeMapping) {
    const std::pair<const char*, DType> kMap[] = {
        {"F32", DType::kF32},        {"BF16", DType::kBF16},    {"F16", DType::kF16},
        {"F8_E4M3", DType::kF8E4M3}, {"F8_E8M0", DType::kE8M0}, {"I8", DType::kI8},
        {"U8", DType::kU8},          {"I32", DType::kI32},      {"I64", DType::kI64}};
    for (const auto& [s, t] : kMap) {
        auto r = safetensors_dtype(s, "w", "f.safetensors");
        ASSERT_TRUE(r.ok()) << s;
        EXPECT_EQ(*r, t) << s;
    }
    auto bad = safetensors_dtype("F64", "layers.0.w", "dir/f.safetensors");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("dir/f.safetensors"), std::string::npos);
    EXPECT_NE(bad.error().message.find("'layers.0.w'"), std::string::npos);
    EXPECT_NE(bad.error().message.find("F64"), std::string::npos);
    // F64 is a valid safetensors dtype: the file parses, only the mapping refuses it.
    EXPECT_TRUE(parse(make_safetensors(one("F64", "[1]", "[0,8]"), std::string(8, 'x'))).ok());
}

}  // namespace
}  // namespace di::io
