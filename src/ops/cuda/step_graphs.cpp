#include "ops/cuda/step_graphs.h"

#include <algorithm>

#include "core/check.h"

namespace di::ops::cuda_impl {
namespace {

// Bounds of the caches: serving steps of many shapes must not grow them without limit.
constexpr size_t kMaxGraphs = 512, kMaxSeen = 8192;

void ok(cudaError_t e, const char* what) {
    DI_CHECK(e == cudaSuccess, "CUDA graph {}: {}", what, cudaGetErrorString(e));
}

bool same(std::span<const int64_t> a, const std::vector<int64_t>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

template <class Map>
auto find_in(Map& m, std::span<const int64_t> key, uint64_t h) -> typename Map::iterator {
    auto [lo, hi] = m.equal_range(h);
    for (auto it = lo; it != hi; ++it)
        if constexpr (requires { it->second.key; }) {
            if (same(key, it->second.key)) return it;
        } else {
            if (same(key, it->second)) return it;
        }
    return m.end();
}

}  // namespace

uint64_t StepGraphs::hash(std::span<const int64_t> key) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t v : key) h = (h ^ uint64_t(v)) * 1099511628211ull;
    return h;
}

StepGraphs::Entry* StepGraphs::find(std::span<const int64_t> key, uint64_t h) {
    auto it = find_in(cache_, key, h);
    return it == cache_.end() ? nullptr : &it->second;
}

void StepGraphs::set_enabled(bool on) {
    if (!on) clear();
    enabled_ = on;
}

void StepGraphs::clear() {
    DI_CHECK(mode_ == Mode::kNone || mode_ == Mode::kEager, "graphs cleared inside a segment");
    if (!cache_.empty()) {
        cudaStreamSynchronize(s_);  // a graph still running keeps its buffers until the stream is done
        for (auto& [h, e] : cache_) cudaGraphExecDestroy(e.exec);
    }
    cache_.clear();
    seen_.clear();
    never_.clear();
}

StepGraphs::Mode StepGraphs::begin(std::span<const int64_t> key) {
    DI_CHECK(mode_ == Mode::kNone, "graph segments do not nest");
    if (!enabled_) return mode_ = Mode::kEager;
    key_.assign(key.begin(), key.end());
    hash_ = hash(key);
    if (Entry* e = find(key, hash_)) {
        if (fingerprint_(e->touched) == e->fingerprint) {
            cur_ = e;
            return mode_ = Mode::kReplay;
        }
        cudaStreamSynchronize(s_);  // a scratch buffer it used was replaced: capture it again
        cudaGraphExecDestroy(e->exec);
        cache_.erase(find_in(cache_, key, hash_));
    } else if (find_in(never_, key, hash_) != never_.end()) {
        ++eager;
        return mode_ = Mode::kEager;
    } else if (find_in(seen_, key, hash_) == seen_.end()) {
        if (seen_.size() >= kMaxSeen) seen_.clear();
        seen_.emplace(hash_, key_);
        ++eager;
        return mode_ = Mode::kEager;
    }
    if (cache_.size() >= kMaxGraphs) clear();
    ok(cudaStreamBeginCapture(s_, cudaStreamCaptureModeRelaxed), "begin capture");
    return mode_ = Mode::kCapture;
}

void StepGraphs::launch_once(cudaGraph_t g) {
    cudaGraphExec_t exec = nullptr;
    ok(cudaGraphInstantiate(&exec, g, 0), "instantiate");
    cudaGraphDestroy(g);
    ok(cudaGraphLaunch(exec, s_), "launch");
    ok(cudaStreamSynchronize(s_), "run");
    cudaGraphExecDestroy(exec);
}

const std::vector<int64_t>* StepGraphs::end(uint32_t touched, const std::vector<int64_t>& count_delta) {
    const Mode m = mode_;
    mode_ = Mode::kNone;
    if (m == Mode::kReplay) {
        ok(cudaGraphLaunch(cur_->exec, s_), "replay");
        ++replays;
        return &cur_->counts;
    }
    if (m != Mode::kCapture) return nullptr;
    cudaGraph_t g = nullptr;
    ok(cudaStreamEndCapture(s_, &g), "end capture");
    Entry e;
    e.key = key_;
    ok(cudaGraphInstantiate(&e.exec, g, 0), "instantiate");
    cudaGraphDestroy(g);
    ok(cudaGraphLaunch(e.exec, s_), "launch");
    e.touched = touched;
    e.fingerprint = fingerprint_(touched);
    e.counts = count_delta;
    cache_.emplace(hash_, std::move(e));
    ++captures;
    return nullptr;
}

void StepGraphs::interrupt() {
    DI_CHECK(mode_ != Mode::kReplay,
             "a replayed graph segment met a host copy or sync: its key misses an input");
    if (mode_ != Mode::kCapture) return;
    cudaGraph_t g = nullptr;
    ok(cudaStreamEndCapture(s_, &g), "end capture");
    launch_once(g);
    never_.emplace(hash_, key_);
    ++interrupted;
    mode_ = Mode::kEager;
}

}  // namespace di::ops::cuda_impl
