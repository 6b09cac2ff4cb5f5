// The server process's own memory, for /metrics: resident set and the allocator's bytes in use. Resident
// memory moves with the allocator (a thread's first arena, a trim) without any leak; heap in use does not, so
// leak checks read that.
#pragma once

#include <cstdint>

namespace di::server {

struct ProcessMemory {
    int64_t resident_bytes = -1;     // -1 where the platform does not say
    int64_t heap_in_use_bytes = -1;  // malloc'd and not yet freed, all arenas and mmapped chunks
};

ProcessMemory read_process_memory();

}  // namespace di::server
