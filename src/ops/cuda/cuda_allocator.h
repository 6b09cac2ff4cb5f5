// Device memory for the CUDA backend: a caching allocator over cudaMalloc. Freed blocks are kept in
// per-size free lists (sizes rounded up to 512 B below 1 MiB, to 2 MiB above) and reused, so a steady-state
// decode loop allocates nothing from the driver.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace di::ops::cuda_impl {

class CachingAllocator final : public Allocator {
  public:
    explicit CachingAllocator(int device) : device_(device) {}
    ~CachingAllocator() override;
    void* allocate(size_t bytes) override;
    void deallocate(void* p) override;
    Device device() const override { return Device::kCuda; }
    size_t bytes_in_use() const { return in_use_; }
    size_t bytes_reserved() const { return reserved_; }

  private:
    static size_t round_size(size_t bytes);
    int device_;
    std::mutex mu_;
    std::multimap<size_t, void*> free_;       // size -> block
    std::unordered_map<void*, size_t> live_;  // block -> size
    size_t in_use_ = 0, reserved_ = 0;
};

}  // namespace di::ops::cuda_impl
