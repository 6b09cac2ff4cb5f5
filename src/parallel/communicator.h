// Collectives between the ranks that share one model (issue: several GPUs). Every rank calls the same
// collectives in the same order; the results are the same bits on every rank whatever the timing (sums in
// rank order). A collective that a peer does not join within the group's timeout, or that runs after a
// peer failed, returns an error naming the collective and the cause on every rank: a dead rank ends the
// others with a message, never a hang.
#pragma once

#include <chrono>
#include <memory>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace di::parallel {

class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // Whether the buffers of the collectives are device memory (NCCL) or host memory (threads as ranks).
    virtual bool device_memory() const = 0;
    // buf (f32, contiguous, the same shape on every rank) becomes the sum over the ranks, added in rank
    // order ((r0 + r1) + r2 ...).
    virtual Status all_reduce_sum(const TensorView& buf) = 0;
    // dst (contiguous, size() times src's bytes) receives every rank's src, in rank order.
    virtual Status all_gather(const TensorView& src, const TensorView& dst) = 0;
    virtual Status barrier() = 0;
    // This rank is ending (an error, an exception): every peer's pending and later collectives fail with
    // `why`.
    virtual void fail(std::string_view why) = 0;
};

// Ranks in threads of one process, exchanging host memory (the CPU backend, and the tests of everything
// built on a Communicator).
std::vector<std::unique_ptr<Communicator>> make_local_group(int size, std::chrono::milliseconds timeout);

}  // namespace di::parallel
