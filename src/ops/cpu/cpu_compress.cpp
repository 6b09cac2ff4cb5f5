// The KV compressor on the CPU: the reference's own entries (ops/ref/ref_compressor.h, so its bits) for
// (entry, channel block) pairs over the pool, then the state the chunk leaves, once every entry has read the
// state it found.
#include <algorithm>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/ref/ref_compressor.h"

namespace di::ops {

void CpuBackend::compress(const CompressArgs& a) {
    if (!take_fast(cpu_fast_index("compress"))) return ref_->compress(a);
    check(a);
    constexpr int64_t kChannelBlock = 64;
    const int64_t n_new = a.out.shape[0], d = a.out.shape[1];
    const int64_t blocks = (d + kChannelBlock - 1) / kChannelBlock, items = n_new * blocks;
    const int64_t work = n_new * d * (a.overlap ? 2 : 1) * a.rate * 64;  // ~64 flops an exp
    pool_.parallel_for(items, work < cpu::kMinParallelMacs ? items : 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
            const int64_t c0 = i % blocks * kChannelBlock;
            compress_entries(a, i / blocks, c0, std::min(d, c0 + kChannelBlock));
        }
    });
    compress_store_state(a);
}

}  // namespace di::ops
