// Activation arena for one forward step: bump allocation from one device block, reset every step. When a
// step needs more than the block holds, overflow blocks are used and the next reset() replaces everything
// by one block of the high-water size, so steady-state decoding allocates nothing. A sub-layer's buffers
// die with it: mark() before it and rewind() after give its memory to the next one, so the arena holds the
// step's buffers and one sub-layer's, not every layer's. Reuse is safe because every op of a step runs in
// one stream order: a later sub-layer's writes follow the earlier one's reads.
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
    struct Mark {
        size_t block = 0, offset = 0, used = 0;
    };

    explicit Workspace(Allocator& alloc) : alloc_(&alloc) {}
    void reset();
    TensorView take(DType dtype, std::initializer_list<int64_t> shape);
    // Where the next take would start; rewind(m) frees every take made after mark() gave m.
    Mark mark() const { return {current_, offset_, used_}; }
    void rewind(const Mark& m);
    size_t capacity() const { return capacity_; }
    size_t held() const;  // bytes of all blocks
    // Bytes held by live takes, the most held at once this step, and a counter of the blocks ever
    // allocated: with the step's order of takes and rewinds, used and generation fix the address of the
    // next take (the graph segments' keys use them).
    size_t used() const { return used_; }
    size_t peak() const { return peak_; }
    uint64_t generation() const { return generation_; }

  private:
    Allocator* alloc_;
    std::vector<Tensor> blocks_;
    size_t capacity_ = 0;  // bytes of blocks_[0]
    size_t current_ = 0;   // the block takes come from
    size_t used_ = 0;      // bytes of live takes, all blocks
    size_t peak_ = 0;      // the most used_ this step
    size_t offset_ = 0;    // bytes taken from the current block
    uint64_t generation_ = 0;
};

// host (not empty) copied to a vector taken from ws on be's device.
TensorView upload_i32(Workspace& ws, ops::Backend& be, const std::vector<int32_t>& host);

}  // namespace di::model
