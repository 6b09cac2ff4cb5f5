// Checkpoint::open on fixtures written by the `safetensors` package (tools/make_io_fixtures.py) and on
// directories the test builds: single file, index + shards, a folder of files, and every broken layout.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace di::io {
namespace {

using nlohmann::json;
using test::make_safetensors;
using test::TempDir;
using test::write_bytes;

std::string hex(const uint8_t* p, size_t n) {
    static const char* d = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; ++i) s += {d[p[i] >> 4], d[p[i] & 15]};
    return s;
}

void expect_matches_fixture(const Checkpoint& ck, const json& expected) {
    ASSERT_EQ(ck.tensors().size(), expected.size());
    for (const auto& [name, want] : expected.items()) {
        const TensorEntry* e = ck.find(name);
        ASSERT_NE(e, nullptr) << name;
        EXPECT_EQ(e->st_dtype, want["dtype"].get<std::string>()) << name;
        EXPECT_EQ(e->shape, want["shape"].get<std::vector<int64_t>>()) << name;
        EXPECT_EQ(hex(e->data, e->nbytes), want["hex"].get<std::string>()) << name;
        EXPECT_EQ(std::filesystem::path(e->file).filename().string(), want["file"].get<std::string>())
            << name;
        EXPECT_TRUE(safetensors_dtype(e->st_dtype, name, e->file).ok()) << name;
    }
}

json fixture_expectations() {
    return json::parse(test::read_bytes(test::test_data_dir() + "/safetensors/expected.json"));
}

TEST(Checkpoint, SingleFileFixture) {
    auto ck = Checkpoint::open(test::test_data_dir() + "/safetensors/single");
    ASSERT_TRUE(ck.ok()) << ck.error().message;
    expect_matches_fixture(*ck, fixture_expectations()["single"]);
    // Spot-check decoded values against what torch wrote: scalar f32 1.5, e8m0 scale 2^-3.
    float scalar;
    std::memcpy(&scalar, ck->find("scalar")->data, 4);
    EXPECT_EQ(scalar, 1.5f);
    EXPECT_EQ(e8m0_to_f32(ck->find("layers.0.attn.wq_a.scale")->data[0]), 0.125f);
    EXPECT_EQ(ck->find(""), nullptr);
}

TEST(Checkpoint, ShardedFixture) {
    auto ck = Checkpoint::open(test::test_data_dir() + "/safetensors/sharded");
    ASSERT_TRUE(ck.ok()) << ck.error().message;
    expect_matches_fixture(*ck, fixture_expectations()["sharded"]);
}

struct Shards {
    TempDir dir;
    // a.safetensors: x (U8[2]); b.safetensors: y (U8[3]).
    Shards() {
        write_bytes(dir.file("a.safetensors"),
                    make_safetensors(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "ab"));
        write_bytes(dir.file("b.safetensors"),
                    make_safetensors(R"({"y":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})", "cde"));
    }
    void index(const std::string& weight_map) {
        write_bytes(dir.file("model.safetensors.index.json"),
                    R"({"metadata":{},"weight_map":)" + weight_map + "}");
    }
};

void expect_open_error(const std::string& dir, std::initializer_list<std::string> parts) {
    auto ck = Checkpoint::open(dir);
    ASSERT_FALSE(ck.ok());
    const std::string& msg = ck.error().message;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts)
        EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
}

TEST(Checkpoint, IndexWithShards) {
    Shards s;
    s.index(R"({"x":"a.safetensors","y":"b.safetensors"})");
    auto ck = Checkpoint::open(s.dir.str());
    ASSERT_TRUE(ck.ok()) << ck.error().message;
    EXPECT_EQ(ck->tensors().size(), 2u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(ck->find("y")->data), 3), "cde");
    EXPECT_EQ(ck->find("y")->file, s.dir.file("b.safetensors"));
    EXPECT_EQ(ck->dir(), s.dir.str());
}

TEST(Checkpoint, FolderWithoutIndexTakesAllFiles) {
    Shards s;
    write_bytes(s.dir.file("notes.txt"), "not a checkpoint");
    auto ck = Checkpoint::open(s.dir.str());
    ASSERT_TRUE(ck.ok()) << ck.error().message;
    EXPECT_NE(ck->find("x"), nullptr);
    EXPECT_NE(ck->find("y"), nullptr);
}

TEST(Checkpoint, SingleModelFileWinsOverOthers) {
    Shards s;
    write_bytes(s.dir.file("model.safetensors"),
                make_safetensors(R"({"z":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "z"));
    auto ck = Checkpoint::open(s.dir.str());
    ASSERT_TRUE(ck.ok()) << ck.error().message;
    EXPECT_EQ(ck->tensors().size(), 1u);
    EXPECT_NE(ck->find("z"), nullptr);
}

TEST(Checkpoint, MissingShard) {
    Shards s;
    s.index(R"({"x":"a.safetensors","y":"model-00002.safetensors"})");
    expect_open_error(s.dir.str(),
                      {"model.safetensors.index.json", "model-00002.safetensors", "'y'", "does not exist"});
}

TEST(Checkpoint, IndexListsTensorTheShardLacks) {
    Shards s;
    s.index(R"({"x":"a.safetensors","y":"a.safetensors"})");  // y is really in b, which the index never names
    expect_open_error(s.dir.str(), {"'y'", "a.safetensors", "no shard holds it"});
    s.index(R"({"x":"a.safetensors","y":"b.safetensors","w":"b.safetensors"})");
    expect_open_error(s.dir.str(), {"'w'", "b.safetensors"});
}

TEST(Checkpoint, DuplicateTensorAcrossShards) {
    Shards s;
    write_bytes(s.dir.file("c.safetensors"),
                make_safetensors(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "q"));
    expect_open_error(s.dir.str(), {"'x'", "a.safetensors", "c.safetensors"});
    s.index(R"({"x":"a.safetensors","y":"b.safetensors","q":"c.safetensors"})");
    expect_open_error(s.dir.str(), {"'x'", "both"});
}

TEST(Checkpoint, BadIndex) {
    Shards s;
    write_bytes(s.dir.file("model.safetensors.index.json"), R"({"weight_map": {"x": "a.safetensors",)");
    expect_open_error(s.dir.str(), {"model.safetensors.index.json", "invalid JSON"});
    s.index(R"(["a.safetensors"])");
    expect_open_error(s.dir.str(), {"weight_map", "array"});
    s.index(R"({"x": 3})");
    expect_open_error(s.dir.str(), {"weight_map['x']", "integer 3"});
    s.index(R"({"x": "../a.safetensors"})");
    expect_open_error(s.dir.str(), {"weight_map['x']", "../a.safetensors", "plain file name"});
    write_bytes(s.dir.file("model.safetensors.index.json"), R"({"metadata": {}})");
    expect_open_error(s.dir.str(), {"missing field 'weight_map'"});
}

TEST(Checkpoint, BrokenShardNamesFile) {
    Shards s;
    write_bytes(s.dir.file("b.safetensors"), make_safetensors("{}", "", 99));
    expect_open_error(s.dir.str(), {"b.safetensors", "header length 99"});
}

TEST(Checkpoint, EmptyOrMissingDirectory) {
    TempDir empty;
    expect_open_error(empty.str(), {empty.str(), "no model.safetensors.index.json"});
    expect_open_error(empty.file("nope"), {"nope", "does not exist"});
}

}  // namespace
}  // namespace di::io
