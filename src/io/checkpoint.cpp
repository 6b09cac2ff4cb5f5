// Checkpoint::open: finds the safetensors files of a model directory, maps them and indexes every tensor.
// Order of preference: model.safetensors.index.json (sharded), model.safetensors, every *.safetensors.
#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "io/json_text.h"
#include "io/safetensors.h"

namespace di::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// The index's weight_map: tensor name -> shard file name (a plain file name inside the directory).
Result<std::map<std::string, std::string>> read_weight_map(const std::string& index_path) {
    DI_TRY(std::string text, read_text_file(index_path));
    DI_TRY(json index, parse_json_text(text, index_path));
    if (!index.is_object())
        return make_error(ErrorCode::kFormat, "{}: expected a JSON object, got {}", index_path,
                          describe_json(index));
    if (!index.contains("weight_map"))
        return make_error(ErrorCode::kFormat, "{}: missing field 'weight_map'", index_path);
    const json& wm = index["weight_map"];
    if (!wm.is_object())
        return make_error(ErrorCode::kFormat, "{}: weight_map must be an object, got {}", index_path,
                          describe_json(wm));
    std::map<std::string, std::string> out;
    for (const auto& [name, shard] : wm.items()) {
        if (!shard.is_string())
            return make_error(ErrorCode::kFormat, "{}: weight_map[{}] must be a file name string, got {}",
                              index_path, io::quoted(name), describe_json(shard));
        const std::string s = shard.get<std::string>();
        if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos)
            return make_error(ErrorCode::kFormat, "{}: weight_map[{}] = {} is not a plain file name",
                              index_path, io::quoted(name), io::quoted(s));
        out.emplace(name, s);
    }
    if (out.empty()) return make_error(ErrorCode::kFormat, "{}: weight_map is empty", index_path);
    return out;
}

// All *.safetensors files directly inside `dir`, sorted by name.
Result<std::vector<std::string>> list_safetensors(const std::string& dir) {
    std::error_code ec;
    std::vector<std::string> names;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const fs::path& p = it->path();
        if (p.extension() == ".safetensors" && it->is_regular_file(ec))
            names.push_back(p.filename().string());
    }
    if (ec) return make_error(ErrorCode::kIo, "{}: cannot list directory: {}", dir, ec.message());
    std::sort(names.begin(), names.end());
    return names;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        return make_error(ErrorCode::kNotFound, "{}: checkpoint directory does not exist", dir);

    const std::string index_path = (fs::path(dir) / kIndexName).string();
    std::vector<std::string> shards;
    std::map<std::string, std::string> weight_map;
    if (fs::exists(index_path, ec)) {
        DI_TRY(auto wm, read_weight_map(index_path));
        weight_map = std::move(wm);
        std::set<std::string> unique;
        for (const auto& [name, shard] : weight_map) unique.insert(shard);
        shards.assign(unique.begin(), unique.end());
        for (const auto& s : shards)
            if (!fs::is_regular_file(fs::path(dir) / s, ec)) {
                const auto it = std::find_if(weight_map.begin(), weight_map.end(),
                                             [&](const auto& kv) { return kv.second == s; });
                return make_error(ErrorCode::kNotFound, "{}: shard {} (holding {}) does not exist in {}",
                                  index_path, io::quoted(s), io::quoted(it->first), dir);
            }
    } else if (fs::is_regular_file(fs::path(dir) / kSingleName, ec)) {
        shards.push_back(kSingleName);
    } else {
        DI_TRY(auto names, list_safetensors(dir));
        if (names.empty())
            return make_error(ErrorCode::kNotFound, "{}: no {}, {} or *.safetensors file", dir, kIndexName,
                              kSingleName);
        shards = std::move(names);
    }

    Checkpoint ck;
    ck.dir_ = dir;
    for (const auto& s : shards) {
        const std::string path = (fs::path(dir) / s).string();
        DI_TRY(std::shared_ptr<MmapFile> file, MmapFile::open(path));
        DI_TRY(std::vector<TensorEntry> entries, parse_safetensors(file->data(), file->size(), path));
        for (auto& e : entries) {
            const auto [it, inserted] = ck.tensors_.emplace(e.name, e);
            if (!inserted)
                return make_error(ErrorCode::kFormat, "{}: tensor {} is in both {} and {}", dir,
                                  io::quoted(e.name), it->second.file, e.file);
        }
        ck.files_.push_back(std::move(file));
    }
    for (const auto& [name, shard] : weight_map) {
        const TensorEntry* e = ck.find(name);
        const std::string want = (fs::path(dir) / shard).string();
        if (e == nullptr || e->file != want)
            return make_error(ErrorCode::kFormat, "{}: tensor {} is listed in shard {} but {}", index_path,
                              io::quoted(name), io::quoted(shard),
                              e == nullptr ? "no shard holds it" : "it is in " + e->file);
    }
    return ck;
}

Checkpoint Checkpoint::in_memory(std::string label, std::vector<TensorEntry> entries,
                                 std::shared_ptr<const void> keep) {
    Checkpoint ck;
    ck.dir_ = std::move(label);
    for (auto& e : entries) ck.tensors_.emplace(e.name, std::move(e));
    ck.memory_ = std::move(keep);
    return ck;
}

const TensorEntry* Checkpoint::find(const std::string& name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace di::io
