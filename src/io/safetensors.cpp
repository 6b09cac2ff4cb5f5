// safetensors header validation and checkpoint directories (single file, index + shards, or a folder of
// files). The rules mirror the reference `safetensors` library: the data section must be covered exactly,
// without overlaps or holes, by the tensors' [begin, end) ranges.
#include "io/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "io/json_text.h"

namespace di::io {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // same cap as the reference library

struct StDtype {
    std::string_view name;
    size_t size;
};
// Every byte-sized dtype of the format, so a checkpoint with an unused exotic tensor still opens;
// safetensors_dtype() decides what deepinfer can compute with.
constexpr StDtype kStDtypes[] = {{"BOOL", 1},    {"U8", 1},      {"I8", 1},  {"F8_E5M2", 1},
                                 {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I16", 2}, {"U16", 2},
                                 {"F16", 2},     {"BF16", 2},    {"I32", 4}, {"U32", 4},
                                 {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};

size_t st_dtype_size(std::string_view name) {
    for (const auto& d : kStDtypes)
        if (d.name == name) return d.size;
    return 0;
}

Error format_error(const std::string& path, const std::string& what) {
    return make_error(ErrorCode::kFormat, "{}: safetensors: {}", path, what);
}

// Reads one tensor entry of the header; `data_bytes` is the size of the data section.
struct ParsedEntry {
    TensorEntry entry;   // `data` still null
    uint64_t begin = 0;  // offset in the data section
};

Result<ParsedEntry> parse_entry(const std::string& name, const json& v, uint64_t data_bytes,
                                const std::string& path) {
    const std::string where = "tensor " + io::quoted(name);
    if (!v.is_object())
        return format_error(path, fmt::format("{}: expected an object, got {}", where, describe_json(v)));
    for (const auto& [key, _] : v.items())
        if (key != "dtype" && key != "shape" && key != "data_offsets")
            return format_error(path, fmt::format("{}: unknown field {}", where, io::quoted(key)));
    for (const char* key : {"dtype", "shape", "data_offsets"})
        if (!v.contains(key)) return format_error(path, fmt::format("{}: missing field '{}'", where, key));

    TensorEntry e;
    e.name = name;
    e.file = path;
    const json& dt = v["dtype"];
    if (!dt.is_string())
        return format_error(path,
                            fmt::format("{}: dtype must be a string, got {}", where, describe_json(dt)));
    e.st_dtype = dt.get<std::string>();
    const size_t elem = st_dtype_size(e.st_dtype);
    if (elem == 0)
        return format_error(path, fmt::format("{}: unknown dtype {}", where, io::quoted(e.st_dtype)));

    const json& shape = v["shape"];
    if (!shape.is_array())
        return format_error(path,
                            fmt::format("{}: shape must be an array, got {}", where, describe_json(shape)));
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t i = 0; i < shape.size(); ++i) {
        const json& d = shape[i];
        if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
            return format_error(path, fmt::format("{}: shape[{}] must be a non-negative integer, got {}",
                                                  where, i, describe_json(d)));
        const uint64_t dim = d.get<uint64_t>();
        e.shape.push_back(int64_t(dim));
        overflow |= __builtin_mul_overflow(numel, dim, &numel);
    }
    uint64_t want_bytes = 0;
    overflow |= __builtin_mul_overflow(numel, uint64_t(elem), &want_bytes);
    if (overflow)
        return format_error(path,
                            fmt::format("{}: shape {} overflows 64-bit byte count", where, shape.dump()));

    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2)
        return format_error(path, fmt::format("{}: data_offsets must be an array of 2 integers, got {}",
                                              where, describe_json(off)));
    for (size_t i = 0; i < 2; ++i)
        if (!off[i].is_number_unsigned())
            return format_error(
                path, fmt::format("{}: data_offsets[{}] must be a non-negative integer, got {}", where, i,
                                  describe_json(off[i])));
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end)
        return format_error(path,
                            fmt::format("{}: data_offsets [{}, {}] has begin > end", where, begin, end));
    if (end > data_bytes)
        return format_error(
            path, fmt::format("{}: data_offsets [{}, {}] end past the data section of {} bytes", where, begin,
                              end, data_bytes));
    if (end - begin != want_bytes)
        return format_error(
            path, fmt::format("{}: data_offsets [{}, {}] span {} bytes, but {} {} needs {}", where, begin,
                              end, end - begin, e.st_dtype, shape.dump(), want_bytes));
    e.nbytes = size_t(end - begin);
    return ParsedEntry{std::move(e), begin};
}

Status check_metadata(const json& v, const std::string& path) {
    if (!v.is_object())
        return format_error(path, fmt::format("__metadata__ must be an object, got {}", describe_json(v)));
    for (const auto& [key, val] : v.items())
        if (!val.is_string())
            return format_error(path, fmt::format("__metadata__[{}] must be a string, got {}",
                                                  io::quoted(key), describe_json(val)));
    return ok_status();
}

// The data section must be tiled exactly: sorted by offset, each range starts where the previous ended.
Status check_coverage(const std::vector<ParsedEntry>& entries, uint64_t data_bytes, const std::string& path) {
    std::vector<const ParsedEntry*> order;
    for (const auto& p : entries) order.push_back(&p);
    std::sort(order.begin(), order.end(), [](const ParsedEntry* a, const ParsedEntry* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->entry.nbytes < b->entry.nbytes;
    });
    uint64_t covered = 0;
    std::string covered_by = "the header";
    for (const ParsedEntry* p : order) {
        const uint64_t b = p->begin, e = b + p->entry.nbytes;
        if (b < covered)
            return format_error(path, fmt::format("tensor {}: data_offsets [{}, {}] overlap {} (ends at {})",
                                                  io::quoted(p->entry.name), b, e, covered_by, covered));
        if (b > covered)
            return format_error(
                path, fmt::format("tensor {}: data_offsets [{}, {}] leave a hole of {} bytes after {}",
                                  io::quoted(p->entry.name), b, e, b - covered, covered_by));
        if (e > covered) {
            covered = e;
            covered_by = "tensor " + io::quoted(p->entry.name);
        }
    }
    if (covered != data_bytes)
        return format_error(
            path, fmt::format("data section is {} bytes but the tensors cover only the first {}", data_bytes,
                              covered));
    return ok_status();
}

}  // namespace

Result<std::vector<TensorEntry>> parse_safetensors(const uint8_t* data, size_t file_size,
                                                   const std::string& path) {
    if (file_size < 8)
        return format_error(
            path, fmt::format("file is {} bytes, too short for the 8-byte header length", file_size));
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
    if (header_len > kMaxHeaderBytes)
        return format_error(
            path, fmt::format("header length {} exceeds the {} byte limit", header_len, kMaxHeaderBytes));
    if (header_len > file_size - 8)
        return format_error(path, fmt::format("header length {} exceeds the {} bytes after the length field",
                                              header_len, file_size - 8));
    const uint64_t data_bytes = file_size - 8 - header_len;
    const std::string_view text(reinterpret_cast<const char*>(data + 8), size_t(header_len));

    std::vector<std::string> dup;
    DI_TRY(json header, parse_json_text(text, path + ": safetensors header", &dup));
    if (!header.is_object())
        return format_error(path, fmt::format("header must be a JSON object, got {}", describe_json(header)));
    if (dup.size() == 1)
        return format_error(path, fmt::format("tensor {} appears twice in the header", io::quoted(dup[0])));
    if (dup.size() >= 2)
        return format_error(
            path, fmt::format("tensor {}: key {} appears twice", io::quoted(dup[0]), io::quoted(dup.back())));

    std::vector<ParsedEntry> parsed;
    parsed.reserve(header.size());
    for (const auto& [name, v] : header.items()) {
        if (name == "__metadata__") {
            DI_TRY_STATUS(check_metadata(v, path));
            continue;
        }
        DI_TRY(ParsedEntry p, parse_entry(name, v, data_bytes, path));
        parsed.push_back(std::move(p));
    }
    DI_TRY_STATUS(check_coverage(parsed, data_bytes, path));
    const uint8_t* base = data + 8 + header_len;
    std::vector<TensorEntry> entries;
    entries.reserve(parsed.size());
    for (auto& p : parsed) {
        p.entry.data = base + p.begin;
        entries.push_back(std::move(p.entry));
    }
    return entries;
}

Result<DType> safetensors_dtype(const std::string& st_dtype, const std::string& name,
                                const std::string& file) {
    static const std::pair<std::string_view, DType> kMap[] = {
        {"F32", DType::kF32},        {"BF16", DType::kBF16},    {"F16", DType::kF16},
        {"F8_E4M3", DType::kF8E4M3}, {"F8_E8M0", DType::kE8M0}, {"I8", DType::kI8},
        {"U8", DType::kU8},          {"I32", DType::kI32},      {"I64", DType::kI64}};
    for (const auto& [s, t] : kMap)
        if (s == st_dtype) return t;
    return make_error(
        ErrorCode::kUnsupported,
        "{}: tensor {} has dtype {}, expected one of F32, BF16, F16, F8_E4M3, F8_E8M0, I8, U8, I32, I64",
        file, io::quoted(name), io::quoted(st_dtype));
}

}  // namespace di::io
