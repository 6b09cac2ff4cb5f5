// NumPy .npy reader/writer. Header: "\x93NUMPY", major, minor, header length (u16 in v1, u32 in v2/v3),
// then a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded to 64 bytes.
#include "io/npy.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <fstream>

#include "io/json_text.h"
#include "io/mmap_file.h"

namespace di::io {
namespace {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";

std::string shape_literal(const std::vector<int64_t>& shape) {
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
    if (shape.size() == 1) s += ",";
    return s + ")";
}

// Minimal parser for the header dict: string keys; values are strings, True/False or a tuple of integers.
struct HeaderParser {
    std::string_view s;
    size_t i = 0;
    void ws() {
        while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    }
    bool eat(char c) {
        ws();
        if (i < s.size() && s[i] == c) return ++i, true;
        return false;
    }
    bool string(std::string& out) {
        ws();
        if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) return false;
        const char q = s[i++];
        const size_t end = s.find(q, i);
        if (end == std::string_view::npos) return false;
        out = std::string(s.substr(i, end - i));
        i = end + 1;
        return true;
    }
    bool word(std::string_view w) {
        ws();
        if (s.substr(i, w.size()) != w) return false;
        i += w.size();
        return true;
    }
    bool tuple(std::vector<int64_t>& out) {
        if (!eat('(')) return false;
        while (!eat(')')) {
            ws();
            int64_t v = 0;
            size_t digits = 0;
            while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && digits < 18)
                v = v * 10 + (s[i++] - '0'), ++digits;
            if (digits == 0 || (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))) return false;
            out.push_back(v);
            if (!eat(',')) {
                if (!eat(')')) return false;
                break;
            }
        }
        return true;
    }
};

Error bad_header(const std::string& path, std::string_view why) {
    return make_error(ErrorCode::kFormat, "{}: npy header: {}", path, why);
}

}  // namespace

Status write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
    size_t numel = 1;
    for (int64_t d : shape) {
        if (d < 0)
            return make_error(ErrorCode::kInvalidArgument, "{}: npy shape {} has a negative dimension", path,
                              shape_literal(shape));
        numel *= size_t(d);
    }
    std::string dict =
        fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': {}, }}", shape_literal(shape));
    // As numpy.save: spare room to grow axis 0 in place, then spaces so the data starts at a multiple of 64.
    if (!shape.empty()) dict.append(size_t(std::max<int>(0, 21 - int(std::to_string(shape[0]).size()))), ' ');
    const size_t hlen = dict.size() + 1;  // + '\n'
    dict.append(64 - (10 + hlen) % 64, ' ');
    dict += '\n';
    if (dict.size() > 65535) return make_error(ErrorCode::kInvalidArgument, "{}: npy header too long", path);

    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(ErrorCode::kIo, "{}: cannot open for writing", path);
    const uint16_t len = uint16_t(dict.size());
    const char version[2] = {1, 0};
    const char len_le[2] = {char(len & 0xFF), char(len >> 8)};
    out.write(kMagic, 6).write(version, 2).write(len_le, 2).write(dict.data(), std::streamsize(dict.size()));
    out.write(reinterpret_cast<const char*>(data), std::streamsize(numel * sizeof(float)));
    out.close();
    if (!out) return make_error(ErrorCode::kIo, "{}: write failed", path);
    return ok_status();
}

Result<NpyArray> read_npy(const std::string& path) {
    DI_TRY(std::string bytes, read_text_file(path));
    if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
        return bad_header(path, "not an .npy file (missing \\x93NUMPY magic)");
    const int major = uint8_t(bytes[6]);
    size_t header_len = 0, prefix = 0;
    if (major == 1) {
        header_len = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
        prefix = 10;
    } else if (major == 2 || major == 3) {
        if (bytes.size() < 12) return bad_header(path, "truncated");
        for (int k = 3; k >= 0; --k) header_len = (header_len << 8) | uint8_t(bytes[8 + k]);
        prefix = 12;
    } else {
        return bad_header(path,
                          fmt::format("unsupported format version {}.{}", major, int(uint8_t(bytes[7]))));
    }
    if (header_len > bytes.size() - prefix)
        return bad_header(path,
                          fmt::format("header length {} exceeds file size {}", header_len, bytes.size()));

    HeaderParser p{std::string_view(bytes).substr(prefix, header_len)};
    std::string descr;
    bool have_descr = false, have_shape = false, fortran = false;
    NpyArray arr;
    if (!p.eat('{')) return bad_header(path, "expected '{'");
    while (!p.eat('}')) {
        std::string key;
        if (!p.string(key) || !p.eat(':')) return bad_header(path, "expected 'key':");
        if (key == "descr") {
            if (!p.string(descr)) return bad_header(path, "descr must be a string");
            have_descr = true;
        } else if (key == "fortran_order") {
            if (p.word("True"))
                fortran = true;
            else if (!p.word("False"))
                return bad_header(path, "fortran_order must be True or False");
        } else if (key == "shape") {
            if (!p.tuple(arr.shape))
                return bad_header(path, "shape must be a tuple of non-negative integers");
            have_shape = true;
        } else {
            return bad_header(path, fmt::format("unknown key {}", io::quoted(key)));
        }
        if (!p.eat(',')) {
            if (!p.eat('}')) return bad_header(path, "expected ',' or '}'");
            break;
        }
    }
    if (!have_descr || !have_shape) return bad_header(path, "missing 'descr' or 'shape'");
    if (fortran) return bad_header(path, "fortran_order True is not supported (need C order)");

    size_t item = 0;
    if (descr == "<f4")
        item = 4;
    else if (descr == "<i4")
        item = 4;
    else if (descr == "<i8")
        item = 8;
    else
        return bad_header(
            path, fmt::format("dtype {} not supported (expected '<f4', '<i4' or '<i8')", io::quoted(descr)));

    uint64_t numel = 1;
    for (int64_t d : arr.shape)
        if (__builtin_mul_overflow(numel, uint64_t(d), &numel)) return bad_header(path, "shape overflows");
    const size_t offset = prefix + header_len;
    if (numel > (uint64_t(1) << 60) / item) return bad_header(path, "shape too large");
    const uint64_t want = numel * item;
    if (bytes.size() - offset != want)
        return make_error(ErrorCode::kFormat, "{}: npy data is {} bytes, shape {} of {} needs {}", path,
                          bytes.size() - offset, shape_literal(arr.shape), descr, want);
    const char* src = bytes.data() + offset;
    if (descr == "<f4") {
        arr.f32.resize(numel);
        std::memcpy(arr.f32.data(), src, want);
    } else if (descr == "<i8") {
        arr.i64.resize(numel);
        std::memcpy(arr.i64.data(), src, want);
    } else {
        arr.i64.resize(numel);
        for (size_t k = 0; k < numel; ++k) {
            int32_t v;
            std::memcpy(&v, src + 4 * k, 4);
            arr.i64[k] = v;
        }
    }
    return arr;
}

}  // namespace di::io
