// A small fixed-size thread pool for data-parallel loops (the CPU backend's kernels).
// parallel_for hands out chunks of an index range; the calling thread works too. Which thread runs which
// chunk is not deterministic, so callers make each chunk's result independent of who computes it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace di {

class ThreadPool {
  public:
    // fn(begin, end, worker): process indices [begin, end); worker in [0, size()) identifies the thread
    // (for per-thread scratch memory). 0 is the calling thread. A non-owning reference to the caller's
    // callable (no allocation per call, unlike std::function): valid for the duration of parallel_for.
    class ChunkFn {
      public:
        template <class F>
        ChunkFn(const F& f)  // NOLINT: implicit from any callable
            : obj_(&f), call_([](const void* o, int64_t b, int64_t e, int w) {
                  (*static_cast<const F*>(o))(b, e, w);
              }) {}
        void operator()(int64_t b, int64_t e, int w) const { call_(obj_, b, e, w); }

      private:
        const void* obj_;
        void (*call_)(const void*, int64_t, int64_t, int);
    };

    // n_threads <= 0 picks default_threads(). Starts n_threads - 1 workers.
    explicit ThreadPool(int n_threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return int(workers_.size()) + 1; }

    // Runs fn over [0, n) in chunks of `grain` indices (the last may be shorter) and returns when all are
    // done. With one chunk or one thread it runs inline. Not reentrant: fn must not call parallel_for.
    void parallel_for(int64_t n, int64_t grain, const ChunkFn& fn);

    // DEEPINFER_THREADS if set to a positive integer, else std::thread::hardware_concurrency() (>= 1).
    static int default_threads();

  private:
    void worker_loop(int worker);
    void run_chunks(int worker);

    // Waits up to kSpin for `ready` before the caller blocks: a decode step runs hundreds of short
    // parallel_fors, and waking a sleeping thread costs more than many of them take.
    template <class Ready>
    static bool spin_until(Ready&& ready);

    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable wake_, done_;
    std::atomic<uint64_t> generation_{0};  // bumped per parallel_for; workers wait for a new value
    std::atomic<bool> stop_{false};
    std::atomic<int> active_{0};  // workers still inside the current job

    // The current job (valid while a parallel_for runs).
    const ChunkFn* fn_ = nullptr;
    int64_t n_ = 0, grain_ = 1;
    std::atomic<int64_t> next_{0};
};

}  // namespace di
