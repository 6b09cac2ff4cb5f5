// Helpers for io/config tests: a temporary directory and a raw safetensors file builder.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace di::test {

inline std::string test_data_dir() { return std::string(DI_SOURCE_DIR) + "/tests/data"; }

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
  public:
    TempDir() {
        static std::atomic<int> counter{0};
        path_ = std::filesystem::temp_directory_path() /
                ("deepinfer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string str() const { return path_.string(); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

  private:
    std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// u64 little-endian header length + header text + data. `header_len` overrides the length field.
inline std::string make_safetensors(const std::string& header, const std::string& data,
                                    uint64_t header_len = UINT64_MAX) {
    const uint64_t n = header_len == UINT64_MAX ? header.size() : header_len;
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xFF);
    return out + header + data;
}

}  // namespace di::test
