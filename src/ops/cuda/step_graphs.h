// CUDA graphs of the model's graph segments (Backend::segment_begin): a key seen once runs eagerly, seen
// again it is captured into a graph and launched, and after that it is replayed with one launch while its
// ops return at once. Replaying is valid because the key determines every argument of the run; what the key
// cannot see (backend scratch buffers that grew, a changed allow-list or forced variant) is checked through
// a fingerprint the backend computes for the scratch slots the capture touched.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

namespace di::ops::cuda_impl {

class StepGraphs {
  public:
    enum class Mode : uint8_t { kNone, kEager, kCapture, kReplay };
    // fingerprint(mask): the state of the scratch slots in `mask` (and the variant epoch) right now.
    StepGraphs(cudaStream_t s, std::function<uint64_t(uint32_t)> fingerprint)
        : s_(s), fingerprint_(std::move(fingerprint)) {}
    ~StepGraphs() { clear(); }
    StepGraphs(const StepGraphs&) = delete;
    StepGraphs& operator=(const StepGraphs&) = delete;

    void set_enabled(bool on);
    // Starts a segment: kEager (first sighting, graphs off, or not capturable), kCapture (stream capture has
    // begun) or kReplay (the caller's ops must return at once).
    Mode begin(std::span<const int64_t> key);
    // Ends it: a capture is instantiated, cached and launched, a replay launched. `touched`: the scratch
    // slots the capture used. Returns the dispatch-count delta a replay adds (empty otherwise).
    const std::vector<int64_t>* end(uint32_t touched, const std::vector<int64_t>& count_delta);
    // A host sync inside a capture: what was captured so far is launched once, the key is never captured
    // again, and the rest of the segment runs eagerly.
    void interrupt();
    Mode mode() const { return mode_; }
    // Drops every graph (after the stream has finished with them).
    void clear();

    // Segments by how they ran; atomics because /metrics reads them while the engine runs.
    std::atomic<int64_t> captures{0}, replays{0}, eager{0}, interrupted{0};

  private:
    struct Entry {
        std::vector<int64_t> key;
        cudaGraphExec_t exec = nullptr;
        uint32_t touched = 0;
        uint64_t fingerprint = 0;
        std::vector<int64_t> counts;  // dispatch counters one run adds
    };
    static uint64_t hash(std::span<const int64_t> key);
    Entry* find(std::span<const int64_t> key, uint64_t h);
    void launch_once(cudaGraph_t g);

    cudaStream_t s_;
    std::function<uint64_t(uint32_t)> fingerprint_;
    bool enabled_ = false;  // opt-in until replay is verified on the GPU (tests/gpu/cuda_graphs_test.cpp)
    Mode mode_ = Mode::kNone;
    std::vector<int64_t> key_;  // of the open segment
    uint64_t hash_ = 0;
    Entry* cur_ = nullptr;
    std::unordered_multimap<uint64_t, Entry> cache_;
    std::unordered_multimap<uint64_t, std::vector<int64_t>> seen_, never_;  // seen once; not capturable
};

}  // namespace di::ops::cuda_impl
