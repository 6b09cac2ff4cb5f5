// Row-wise ops (rms_norm, rope, swiglu) on the CPU: the reference's own code on blocks of rows over the pool.
// Each row is computed from that row alone, so a block gives the rows the bits of the whole call.
#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/cpu_kernels.h"

namespace di::ops {

void CpuBackend::over_rows(int64_t n, int64_t work_per_row, const std::function<void(int64_t, int64_t)>& f) {
    if (n * work_per_row < cpu::kMinParallelMacs || pool_.size() == 1) return f(0, n);
    const int64_t grain = std::max<int64_t>(1, n / (4 * int64_t(pool_.size())));
    pool_.parallel_for(n, grain, [&](int64_t r0, int64_t r1, int) { f(r0, r1); });
}

void CpuBackend::rms_norm(const RmsNormArgs& a) {
    if (!take_fast(cpu_fast_index("rms_norm"))) return ref_->rms_norm(a);
    check(a);
    over_rows(a.x.shape[0], 4 * a.x.shape[1], [&](int64_t r0, int64_t r1) {
        RmsNormArgs p = a;
        p.x = a.x.rows(r0, r1 - r0), p.y = a.y.rows(r0, r1 - r0);
        ref_->rms_norm(p);
    });
}

void CpuBackend::rope(const RopeArgs& a) {
    if (!take_fast(cpu_fast_index("rope"))) return ref_->rope(a);
    check(a);
    over_rows(a.x.shape[0], 64 * a.inv_freq.numel() + 4 * a.x.shape[1] * a.inv_freq.numel(),
              [&](int64_t r0, int64_t r1) {
                  RopeArgs p = a;
                  p.x = a.x.rows(r0, r1 - r0), p.positions = a.positions.rows(r0, r1 - r0);
                  ref_->rope(p);
              });
}

void CpuBackend::swiglu(const SwigluArgs& a) {
    if (!take_fast(cpu_fast_index("swiglu"))) return ref_->swiglu(a);
    check(a);
    over_rows(a.gate.shape[0], 64 * a.gate.shape[1], [&](int64_t r0, int64_t r1) {
        SwigluArgs p = a;
        p.gate = a.gate.rows(r0, r1 - r0), p.up = a.up.rows(r0, r1 - r0), p.out = a.out.rows(r0, r1 - r0);
        ref_->swiglu(p);
    });
}

}  // namespace di::ops
