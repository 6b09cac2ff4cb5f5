// npy: round trip through write_npy_f32/read_npy, fixtures written by numpy.save, and malformed files.
#include "io/npy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io_test_util.h"

namespace di::io {
namespace {

using nlohmann::json;
using test::TempDir;

std::string npy_dir() { return std::string(DI_SOURCE_DIR) + "/tests/io/data/npy"; }

TEST(Npy, RoundTrip) {
    TempDir dir;
    const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {7}, {}, {0, 5}, {1, 1, 130}};
    for (const auto& shape : shapes) {
        size_t n = 1;
        for (int64_t d : shape) n *= size_t(d);
        std::vector<float> data(n);
        for (size_t i = 0; i < n; ++i) data[i] = float(i) * 0.37f - 5.0f;
        if (n > 1) data[1] = -0.0f;
        const std::string path = dir.file("x.npy");
        ASSERT_TRUE(write_npy_f32(path, data.data(), shape).ok());
        // numpy pads the v1.0 header so data starts at a multiple of 64.
        const std::string raw = test::read_bytes(path);
        const size_t header = 10 + (uint8_t(raw[8]) | (size_t(uint8_t(raw[9])) << 8));
        EXPECT_EQ(header % 64, 0u);
        EXPECT_EQ(raw.size(), header + 4 * n);
        auto r = read_npy(path);
        ASSERT_TRUE(r.ok()) << r.error().message;
        EXPECT_EQ(r->shape, shape);
        ASSERT_EQ(r->f32.size(), n);
        EXPECT_EQ(std::memcmp(r->f32.data(), data.data(), 4 * n), 0);
        EXPECT_TRUE(r->i64.empty());
    }
}

TEST(Npy, WritesTheSameBytesAsNumpy) {
    // Re-writing numpy.save's own files must reproduce them byte for byte (header text, padding, data).
    TempDir dir;
    for (const char* name : {"f32_2x3", "f32_scalar", "f32_empty", "f32_empty_wide"}) {
        const std::string path = npy_dir() + "/" + name + ".npy";
        auto r = read_npy(path);
        ASSERT_TRUE(r.ok()) << r.error().message;
        ASSERT_TRUE(write_npy_f32(dir.file("w.npy"), r->f32.data(), r->shape).ok());
        EXPECT_EQ(test::read_bytes(dir.file("w.npy")), test::read_bytes(path)) << name;
    }
}

TEST(Npy, ReadsNumpyFixtures) {
    const json want = json::parse(test::read_bytes(npy_dir() + "/npy_expected.json"))["arrays"];
    ASSERT_FALSE(want.empty());
    for (const auto& [name, w] : want.items()) {
        auto r = read_npy(npy_dir() + "/" + name + ".npy");
        ASSERT_TRUE(r.ok()) << name << ": " << r.error().message;
        EXPECT_EQ(r->shape, w["shape"].get<std::vector<int64_t>>()) << name;
        const json& vals = w["values"];
        const bool is_f32 = w["descr"] == "<f4";
        ASSERT_EQ(is_f32 ? r->f32.size() : r->i64.size(), vals.size()) << name;
        for (size_t i = 0; i < vals.size(); ++i) {
            if (!is_f32) {
                EXPECT_EQ(r->i64[i], vals[i].get<int64_t>()) << name << "[" << i << "]";
            } else if (vals[i].is_string()) {
                EXPECT_TRUE(std::isinf(r->f32[i])) << name << "[" << i << "]";
            } else {
                EXPECT_EQ(r->f32[i], float(vals[i].get<double>())) << name << "[" << i << "]";
                EXPECT_EQ(std::signbit(r->f32[i]), std::signbit(vals[i].get<double>()))
                    << name << "[" << i << "]";
            }
        }
    }
}

void expect_read_error(const std::string& path, const std::string& part) {
    auto r = read_npy(path);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(part), std::string::npos) << r.error().message;
}

TEST(Npy, RejectsWhatItCannotRead) {
    expect_read_error(npy_dir() + "/bad_fortran.npy", "fortran_order");
    expect_read_error(npy_dir() + "/bad_f64.npy", "'<f8'");
    TempDir dir;
    expect_read_error(dir.file("missing.npy"), "cannot open");
    test::write_bytes(dir.file("text.npy"), "hello world, not numpy");
    expect_read_error(dir.file("text.npy"), "magic");
    // A valid header whose data is one float short.
    const std::string good = test::read_bytes(npy_dir() + "/f32_2x3.npy");
    test::write_bytes(dir.file("short.npy"), good.substr(0, good.size() - 4));
    expect_read_error(dir.file("short.npy"), "needs 24");
    test::write_bytes(dir.file("hdr.npy"), good.substr(0, 40));
    expect_read_error(dir.file("hdr.npy"), "header length");
    std::string bad_shape = good;
    const size_t pos = bad_shape.find("(2, 3)");
    ASSERT_NE(pos, std::string::npos);
    bad_shape.replace(pos, 6, "(2,-3)");
    test::write_bytes(dir.file("shape.npy"), bad_shape);
    expect_read_error(dir.file("shape.npy"), "shape");
}

}  // namespace
}  // namespace di::io
