#include "io/safetensors_writer.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace di::io {

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    size_t offset = 0;
    for (const auto& t : tensors) {
        header[t.name] = {
            {"dtype", t.st_dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
        offset += t.bytes.size();
    }
    std::string text = header.dump();
    while ((8 + text.size()) % 8 != 0) text += ' ';  // data section starts 8-byte aligned
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) return make_error(ErrorCode::kIo, "cannot create '{}'", tmp);
    const uint64_t n = text.size();
    bool ok = std::fwrite(&n, 8, 1, f) == 1 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
    for (const auto& t : tensors)
        ok = ok && std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size();
    ok = std::fclose(f) == 0 && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0)
        return make_error(ErrorCode::kIo, "cannot write '{}'", path);
    return ok_status();
}

}  // namespace di::io
