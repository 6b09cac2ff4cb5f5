#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace di {

int ThreadPool::default_threads() {
    if (const char* env = std::getenv("DEEPINFER_THREADS")) {
        char* end = nullptr;
        const long v = std::strtol(env, &end, 10);
        if (end != env && *end == '\0' && v > 0 && v <= 4096) return int(v);
    }
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : int(hw);
}

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) n_threads = default_threads();
    workers_.reserve(size_t(n_threads - 1));
    for (int w = 1; w < n_threads; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_.store(true);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_chunks(int worker) {
    for (;;) {
        const int64_t begin = next_.fetch_add(grain_, std::memory_order_relaxed);
        if (begin >= n_) return;
        (*fn_)(begin, std::min(n_, begin + grain_), worker);
    }
}

template <class Ready>
bool ThreadPool::spin_until(Ready&& ready) {
    constexpr auto kSpin = std::chrono::microseconds(100);
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0;; ++i) {
        if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
        _mm_pause();
#else
        std::this_thread::yield();
#endif
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
    }
}

void ThreadPool::worker_loop(int worker) {
    uint64_t seen = 0;
    auto ready = [&] {
        return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    for (;;) {
        if (!spin_until(ready)) {
            std::unique_lock<std::mutex> lock(mu_);
            wake_.wait(lock, ready);
        }
        if (stop_.load(std::memory_order_acquire)) return;
        seen = generation_.load(std::memory_order_acquire);  // the job's fields were written before it
        run_chunks(worker);
        if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> lock(mu_);  // the caller checks active_ under mu_ before it waits
            done_.notify_one();
        }
    }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const ChunkFn& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (workers_.empty() || n <= grain) {
        fn(0, n, 0);
        return;
    }
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    next_.store(0, std::memory_order_relaxed);
    active_.store(int(workers_.size()), std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lock(mu_);  // a worker about to sleep re-checks the generation under mu_
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    run_chunks(0);
    auto done = [&] { return active_.load(std::memory_order_acquire) == 0; };
    if (!spin_until(done)) {
        std::unique_lock<std::mutex> lock(mu_);
        done_.wait(lock, done);
    }
    fn_ = nullptr;
}

}  // namespace di
