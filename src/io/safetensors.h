// safetensors files (single or sharded with model.safetensors.index.json), memory-mapped.
// Header: u64 little-endian length N, then N bytes of JSON {name: {dtype, shape, data_offsets: [b, e]}, ...}
// with offsets relative to the end of the header. Every offset, size and dtype is validated on open.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "io/mmap_file.h"

namespace di::io {

struct TensorEntry {
    std::string name;
    std::string st_dtype;        // dtype string as in the file: F32, BF16, F8_E4M3, F8_E8M0, I8, I64, ...
    std::vector<int64_t> shape;  // as in the file
    const uint8_t* data = nullptr;
    size_t nbytes = 0;
    std::string file;  // path of the file holding it (for error messages)
};

// Parses a header from raw bytes (the fuzz entry point). `file_size` is the full file size.
Result<std::vector<TensorEntry>> parse_safetensors(const uint8_t* data, size_t file_size,
                                                   const std::string& path);

// Maps a safetensors dtype string to DType; `name` is used in the error message.
Result<DType> safetensors_dtype(const std::string& st_dtype, const std::string& name,
                                const std::string& file);

class Checkpoint {
  public:
    // `dir` holds model.safetensors, or model.safetensors.index.json and its shards, or any *.safetensors.
    static Result<Checkpoint> open(const std::string& dir);
    // Tensors already in memory (benchmark models drawn without a file); `keep` owns the bytes they point at.
    static Checkpoint in_memory(std::string label, std::vector<TensorEntry> entries,
                                std::shared_ptr<const void> keep);

    const TensorEntry* find(const std::string& name) const;
    const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
    const std::string& dir() const { return dir_; }

  private:
    std::string dir_;
    std::vector<std::shared_ptr<MmapFile>> files_;
    std::shared_ptr<const void> memory_;
    std::map<std::string, TensorEntry> tensors_;
};

}  // namespace di::io
