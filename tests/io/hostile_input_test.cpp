// Outside input that once crashed the engine or was taken silently: JSON nested past the depth limit,
// duplicate keys inside a safetensors entry, config values that loaded but aborted later, non-finite
// weights. Each case must end in a one-line error that names the file, field or tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/finite_scan.h"
#include "io/json_text.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "model/config.h"

namespace di {
namespace {

std::string nested(int depth, const std::string& inner = "1") {
    return std::string(size_t(depth), '[') + inner + std::string(size_t(depth), ']');
}

TEST(JsonDepth, CountsBracketsOutsideStringsOnly) {
    EXPECT_EQ(io::json_nesting_depth("{}"), 1);
    EXPECT_EQ(io::json_nesting_depth(R"({"a": [1, {"b": []}]})"), 4);
    EXPECT_EQ(io::json_nesting_depth(R"({"a": "[[[[{{{{\"[["})"), 1);  // brackets in a string, escaped quote
    EXPECT_EQ(io::json_nesting_depth(nested(io::kMaxJsonDepth)), io::kMaxJsonDepth);
    EXPECT_EQ(io::json_nesting_depth(nested(400000)), io::kMaxJsonDepth + 1);  // stops counting early
}

TEST(JsonDepth, DeepTextIsRefusedBeforeParsing) {
    EXPECT_TRUE(io::parse_json_text(nested(io::kMaxJsonDepth), "ok.json").ok());
    for (int depth : {io::kMaxJsonDepth + 1, 300000}) {
        auto r = io::parse_json_text(nested(depth), "deep.json");
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.error().message, "deep.json: JSON nested deeper than 128 levels");
    }
}

TEST(JsonDuplicates, PathOfTheFirstRepeatedKeyAtAnyDepth) {
    std::vector<std::string> dup;
    ASSERT_TRUE(io::parse_json_text(R"({"a": {"x": 1, "y": 2}, "b": [{"x": 1}, {"x": 2}]})", "s", &dup).ok());
    EXPECT_TRUE(dup.empty());
    ASSERT_TRUE(
        io::parse_json_text(R"({"a": {"x": 1}, "t": {"dtype": "F32", "dtype": "BF16"}})", "s", &dup).ok());
    EXPECT_EQ(dup, (std::vector<std::string>{"t", "dtype"}));
    ASSERT_TRUE(io::parse_json_text(R"({"t": 1, "u": 2, "t": 3})", "s", &dup).ok());
    EXPECT_EQ(dup, (std::vector<std::string>{"t"}));
}

Result<std::vector<io::TensorEntry>> parse_header(const std::string& header, size_t data_bytes) {
    static std::string bytes;
    bytes = test::make_safetensors(header, std::string(data_bytes, '\0'));
    return io::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                 "m.safetensors");
}

TEST(SafetensorsHostile, DuplicateKeysInsideAnEntryNameTheTensor) {
    for (const char* key : {R"("dtype":"F32","dtype":"I32")", R"("shape":[2],"shape":[1,2])",
                            R"("data_offsets":[0,8],"data_offsets":[0,8])"}) {
        const std::string entry =
            std::string(R"({"w.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8],)") + key + "}}";
        auto r = parse_header(entry, 8);
        ASSERT_FALSE(r.ok()) << entry;
        EXPECT_NE(r.error().message.find("tensor 'w.weight': key"), std::string::npos) << r.error().message;
        EXPECT_NE(r.error().message.find("appears twice"), std::string::npos) << r.error().message;
    }
}

TEST(SafetensorsHostile, DeeplyNestedMetadataIsAnErrorNotACrash) {
    auto r = parse_header(R"({"__metadata__":{"a":)" + nested(200000, "\"x\"") + "}}", 0);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("nested deeper than 128 levels"), std::string::npos)
        << r.error().message;
}

TEST(FiniteScan, FindsNanAndInfinityInEveryFloatFormat) {
    struct Case {
        const char* dtype;
        std::vector<uint8_t> bytes;
        int64_t bad;  // -1: clean
    };
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    auto f32 = [](std::initializer_list<float> v) {
        std::vector<uint8_t> b(v.size() * 4);
        std::memcpy(b.data(), v.begin(), b.size());
        return b;
    };
    const Case cases[] = {
        {"F32", f32({1, -2, 3e38f, 1e-45f}), -1},
        {"F32", f32({1, 2, nan}), 2},
        {"F32", f32({-inf, 0}), 0},
        {"BF16", {0x80, 0x3f, 0x80, 0x7f}, 1},     // 1.0, +inf
        {"BF16", {0x80, 0x3f, 0x7f, 0xff}, -1},    // 1.0, -max finite (0xff7f)
        {"F16", {0x00, 0x3c, 0x01, 0x7c}, 1},      // 1.0, NaN
        {"F8_E4M3", {0x7e, 0xfe, 0x38, 0xff}, 3},  // 448, -448, 1, NaN
        {"F8_E8M0", {0x00, 0x7f, 0xfe}, -1},
        {"F8_E8M0", {0x7f, 0xff}, 1},
        {"U8", {0xff, 0xff}, -1},  // packed fp4 cannot be non-finite
    };
    for (const Case& c : cases) {
        io::TensorEntry e;
        e.name = "t";
        e.st_dtype = c.dtype;
        e.data = c.bytes.data();
        e.nbytes = c.bytes.size();
        e.file = "m.safetensors";
        const Status st = io::check_tensor_finite(e);
        if (c.bad < 0) {
            EXPECT_TRUE(st.ok()) << c.dtype << ": " << st.error().message;
        } else {
            ASSERT_FALSE(st.ok()) << c.dtype;
            EXPECT_NE(st.error().message.find("tensor 't' (" + std::string(c.dtype) +
                                              ") holds a NaN or infinity "
                                              "at flat index " +
                                              std::to_string(c.bad)),
                      std::string::npos)
                << st.error().message;
        }
    }
}

nlohmann::json base_config() {
    return nlohmann::json::parse(R"({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
        "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "head_dim": 64,
        "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 16, "sliding_window": 8, "index_n_heads": 2,
        "index_head_dim": 32, "index_topk": 4, "n_routed_experts": 8, "num_experts_per_tok": 2,
        "moe_intermediate_size": 32, "max_position_embeddings": 8192, "eos_token_id": 1})");
}

TEST(ConfigBounds, ValuesThatLoadedButAbortedLaterAreRefusedAtLoad) {
    struct Case {
        const char* field;
        nlohmann::json value;
        const char* says;
    };
    const Case cases[] = {
        {"sliding_window", 1, "field 'sliding_window': 1 is outside the supported range [2, 65536]"},
        {"sliding_window", 1000000000, "1000000000 is outside the supported range"},
        {"eos_token_id", 1000, "field 'eos_token_id': 1000 is outside the vocabulary [0, 1000)"},
        {"eos_token_id", nlohmann::json::array({1, -5}), "-5 is outside the vocabulary"},
        {"bos_token_id", 5000, "field 'bos_token_id': 5000 is outside the vocabulary"},
        {"max_position_embeddings", int64_t(1) << 62, "field 'max_position_embeddings'"},
        {"hidden_size", int64_t(1) << 40, "field 'hidden_size'"},
        {"vocab_size", int64_t(1) << 30, "field 'vocab_size'"},
        {"hc_mult", 1000, "field 'hc_mult'"},
        {"index_topk", int64_t(1) << 40, "field 'index_topk'"},
        {"n_routed_experts", 1000000, "field 'n_routed_experts'"},
    };
    for (const Case& c : cases) {
        nlohmann::json j = base_config();
        j[c.field] = c.value;
        auto r = model::parse_config(j.dump(), "m/config.json");
        ASSERT_FALSE(r.ok()) << c.field << " = " << c.value.dump();
        EXPECT_NE(r.error().message.find(c.says), std::string::npos) << r.error().message;
        EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
    }
    EXPECT_TRUE(model::parse_config(base_config().dump(), "m/config.json").ok());
}

TEST(ConfigBounds, DeeplyNestedConfigIsAnError) {
    nlohmann::json j = base_config();
    const std::string text = j.dump().insert(1, R"("x": )" + nested(10000) + ",");
    auto r = model::parse_config(text, "m/config.json");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("nested deeper than 128"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace di
