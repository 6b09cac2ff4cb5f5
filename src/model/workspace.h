// Activation arena for one forward step: bump allocation from one device block, reset every step. When a
// step needs more than the block holds, overflow blocks are used and the next reset() replaces everything
// by one block of the high-water size, so steady-state decoding allocates nothing.
#pragma once

#include <initializer_list>
#include <vector>

#include "core/tensor.h"

namespace di::ops {
class Backend;
}

namespace di::model {

class Workspace {
  public:
    explicit Workspace(Allocator& alloc) : alloc_(&alloc) {}
    void reset();
    TensorView take(DType dtype, std::initializer_list<int64_t> shape);
    size_t capacity() const { return capacity_; }
    // Bytes taken this step, and a counter of the blocks ever allocated: together they fix the address of
    // the next take (the graph segments' keys use them).
    size_t used() const { return used_; }
    uint64_t generation() const { return generation_; }

  private:
    Allocator* alloc_;
    std::vector<Tensor> blocks_;
    size_t capacity_ = 0;  // bytes of blocks_[0]
    size_t used_ = 0;      // bytes taken this step, all blocks
    size_t offset_ = 0;    // bytes taken from the current block
    uint64_t generation_ = 0;
};

// host (not empty) copied to a vector taken from ws on be's device.
TensorView upload_i32(Workspace& ws, ops::Backend& be, const std::vector<int32_t>& host);

}  // namespace di::model
