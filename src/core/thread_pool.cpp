#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

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
        stop_ = true;
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

void ThreadPool::worker_loop(int worker) {
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mu_);
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        run_chunks(worker);
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (--active_ == 0) done_.notify_one();
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
    {
        std::lock_guard<std::mutex> lock(mu_);
        fn_ = &fn;
        n_ = n;
        grain_ = grain;
        next_.store(0, std::memory_order_relaxed);
        active_ = int(workers_.size());
        ++generation_;
    }
    wake_.notify_all();
    run_chunks(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return active_ == 0; });
    fn_ = nullptr;
}

}  // namespace di
