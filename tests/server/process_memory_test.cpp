// The heap-in-use figure follows allocations exactly (the soak test's leak check relies on it), unlike the
// resident set, which the allocator moves on its own.
#include "server/process_memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace di::server {
namespace {

TEST(ProcessMemory, HeapInUseFollowsAllocations) {
    const ProcessMemory before = read_process_memory();
    ASSERT_GT(before.resident_bytes, 0);
    if (before.heap_in_use_bytes < 0) GTEST_SKIP() << "no allocator statistics on this platform";
    constexpr size_t kBytes = 8u << 20;
    char* p = static_cast<char*>(std::malloc(kBytes));
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, kBytes);
    asm volatile("" : : "r"(p) : "memory");  // keep the stores: the block is freed unread
    const ProcessMemory held = read_process_memory();
    std::free(p);
    const ProcessMemory after = read_process_memory();
    // Allocator headers and the page rounding of a large (mmapped) chunk: well under 64 KiB.
    EXPECT_NEAR(double(held.heap_in_use_bytes - before.heap_in_use_bytes), double(kBytes), 64 * 1024);
    EXPECT_NEAR(double(after.heap_in_use_bytes), double(before.heap_in_use_bytes), 64 * 1024);
    EXPECT_GE(held.resident_bytes - before.resident_bytes, int64_t(kBytes) / 2);  // the touched pages
}

}  // namespace
}  // namespace di::server
