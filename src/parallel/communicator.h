// Collectives between the ranks that share one model (issue: several GPUs). Every rank calls the same
// collectives in the same order; the results are the same bits on every rank whatever the timing (sums in
// rank order). A collective that a peer does not join within the group's timeout, or that runs after a
// peer failed, returns an error naming the collective and the cause on every rank: a dead rank ends the
// others with a message, never a hang.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
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
    // Each rank says how many items it will send each rank; returns how many each rank will send this one
    // (from[p] = rank p's to[this rank]): the counts an all_to_all needs before its buffers exist.
    virtual Result<std::vector<int64_t>> exchange_counts(std::span<const int64_t> to) = 0;
    // send holds, in rank order, send_bytes[p] bytes for rank p; recv receives, in rank order, recv_bytes[p]
    // bytes from rank p (rank p's send_bytes[this rank]). Both contiguous (empty where nothing moves), not
    // overlapping.
    virtual Status all_to_all(const TensorView& send, std::span<const int64_t> send_bytes,
                              const TensorView& recv, std::span<const int64_t> recv_bytes) = 0;
    virtual Status barrier() = 0;
    // This rank is ending (an error, an exception): every peer's pending and later collectives fail with
    // `why`.
    virtual void fail(std::string_view why) = 0;
};

// all_to_all's argument checks (every implementation's): counts >= 0, one per rank, within the buffers.
void check_all_to_all(const TensorView& send, std::span<const int64_t> send_bytes, const TensorView& recv,
                      std::span<const int64_t> recv_bytes);

// Copies bytes between buffers of one process's address space, device memory included (cudaMemcpy with
// cudaMemcpyDefault); it returns when the copy is done.
using MemoryCopy = std::function<void(void* dst, const void* src, size_t bytes)>;

// Ranks in threads of one process, exchanging host memory (the CPU backend, and the tests of everything
// built on a Communicator); with device_copy, device memory through it (several ranks on one GPU: the GPU
// tests of the expert-parallel exchange on a machine of one GPU, where NCCL takes one rank a device).
std::vector<std::unique_ptr<Communicator>> make_local_group(int size, std::chrono::milliseconds timeout,
                                                            MemoryCopy device_copy = {});

}  // namespace di::parallel
