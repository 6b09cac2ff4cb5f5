// json.dumps compatibility; expected strings from Python 3.11 json.dumps(..., ensure_ascii=False) / repr().
#include "tokenizer/python_json.h"

#include <gtest/gtest.h>

namespace di::tok {
namespace {

TEST(PythonJson, FloatRepr) {
    EXPECT_EQ(python_float_repr(1.0), "1.0");
    EXPECT_EQ(python_float_repr(0.1), "0.1");
    EXPECT_EQ(python_float_repr(-0.0), "-0.0");
    EXPECT_EQ(python_float_repr(1e-07), "1e-07");
    EXPECT_EQ(python_float_repr(0.0001), "0.0001");
    EXPECT_EQ(python_float_repr(0.00001), "1e-05");
    EXPECT_EQ(python_float_repr(1e16), "1e+16");
    EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
    EXPECT_EQ(python_float_repr(123456789012345678.0), "1.2345678901234568e+17");
    EXPECT_EQ(python_float_repr(2.5), "2.5");
    EXPECT_EQ(python_float_repr(1e20), "1e+20");
    EXPECT_EQ(python_float_repr(3.14159), "3.14159");
    EXPECT_EQ(python_float_repr(1.5e300), "1.5e+300");
    EXPECT_EQ(python_float_repr(-2.5e-10), "-2.5e-10");
}

TEST(PythonJson, Dumps) {
    auto v = nlohmann::ordered_json::parse(
        R"({"z": 1, "a": [true, null, 2.0, -3, "x\"y\\n\u0001\t"], "u": "你好 é", "e": {}, "l": []})");
    EXPECT_EQ(python_json_dumps(v),
              "{\"z\": 1, \"a\": [true, null, 2.0, -3, \"x\\\"y\\\\n\\u0001\\t\"], \"u\": \"你好 é\", \"e\": "
              "{}, \"l\": []}");
}

}  // namespace
}  // namespace di::tok
