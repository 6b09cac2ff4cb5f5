#include "server/process_memory.h"

#include <unistd.h>

#include <fstream>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace di::server {

ProcessMemory read_process_memory() {
    ProcessMemory m;
    std::ifstream statm("/proc/self/statm");
    long pages_total = 0, pages_resident = 0;
    if (statm >> pages_total >> pages_resident)
        m.resident_bytes = int64_t(pages_resident) * sysconf(_SC_PAGESIZE);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33)) && \
    !defined(                                                                             \
        __SANITIZE_ADDRESS__)  // under ASan malloc is the sanitizer's, which glibc's figures do not see
    const struct mallinfo2 mi = mallinfo2();  // sums every arena
    m.heap_in_use_bytes = int64_t(mi.uordblks + mi.hblkhd);
#endif
    return m;
}

}  // namespace di::server
