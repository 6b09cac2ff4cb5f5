// ThreadPool: every index runs exactly once per parallel_for, whether the workers are still spinning from the
// previous job (back-to-back jobs) or asleep (a pause past the spin window), and the pool shuts down cleanly.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace di {
namespace {

void expect_each_index_once(ThreadPool& pool, int64_t n, int64_t grain) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, grain, [&](int64_t b, int64_t e, int w) {
        ASSERT_GE(w, 0);
        ASSERT_LT(w, pool.size());
        for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(ThreadPool, BackToBackJobsCoverEveryIndexOnce) {
    ThreadPool pool(4);
    for (int j = 0; j < 5000; ++j) expect_each_index_once(pool, 1 + j % 97, 1 + j % 5);
}

TEST(ThreadPool, JobsAfterTheWorkersSleep) {
    ThreadPool pool(3);
    for (int j = 0; j < 20; ++j) {
        expect_each_index_once(pool, 64, 3);
        std::this_thread::sleep_for(std::chrono::milliseconds(j % 2 == 0 ? 2 : 0));  // past the spin window
    }
}

TEST(ThreadPool, OneThreadAndDestructionWhileIdle) {
    {
        ThreadPool one(1);
        expect_each_index_once(one, 10, 1);
    }
    { ThreadPool idle(4); }  // workers never got a job
    ThreadPool pool(2);
    expect_each_index_once(pool, 1000, 7);
}

}  // namespace
}  // namespace di
