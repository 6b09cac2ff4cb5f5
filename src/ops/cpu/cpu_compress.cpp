// The KV compressor on the CPU: the reference's arithmetic element for element (so its bits), with each
// slot's exp computed once instead of twice and the (entry, channel block) pairs over the pool. The state
// (the overlap half of the last closed window, the open window's tokens) is written after every entry has
// read the old one, as the reference writes it.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cpu/cpu_backend.h"
#include "ops/cpu/cpu_kernels.h"

namespace di::ops {
namespace {

float* row(const TensorView& v, int64_t r) { return v.ptr<float>() + r * v.stride[0]; }

constexpr int64_t kChannelBlock = 64;

}  // namespace

void CpuBackend::compress(const CompressArgs& a) {
    if (!take_fast(cpu_fast_index("compress"))) return ref_->compress(a);
    check(a);
    const int64_t L = a.kv.shape[0], rate = a.rate, d = a.out.shape[1];
    const int64_t first_w = a.pos0 / rate, n_new = a.out.shape[0];
    const int64_t n_slots = a.overlap ? 2 * rate : rate;
    // Value and logit (bias included) of channel c of the token at position q.
    auto token = [&](int64_t q, int64_t c, float& value, float& logit) {
        const float* kv = q < a.pos0 ? row(a.buf_kv, q % rate) : row(a.kv, q - a.pos0);
        const float* gate = q < a.pos0 ? row(a.buf_gate, q % rate) : row(a.gate, q - a.pos0);
        value = kv[c];
        logit = gate[c] + row(a.bias, q % rate)[c];
    };
    const int64_t blocks = (d + kChannelBlock - 1) / kChannelBlock, items = n_new * blocks;
    const int64_t work = n_new * d * n_slots * 64;  // ~64 flops an exp
    pool_.parallel_for(
        items, work < cpu::kMinParallelMacs ? items : 1, [&](int64_t b, int64_t e, int worker) {
            CpuScratch& s = scratch_[size_t(worker)];
            if (s.acc.size() < size_t(2 * n_slots)) s.acc.resize(size_t(2 * n_slots));
            if (s.post.size() < size_t(n_slots)) s.post.resize(size_t(n_slots));
            float* val = s.acc.data();
            float* logit = val + n_slots;
            double* ex = s.post.data();  // each slot's exp, computed once
            for (int64_t i = b; i < e; ++i) {
                const int64_t entry = i / blocks, w = first_w + entry, c0 = i % blocks * kChannelBlock;
                for (int64_t c = c0; c < std::min(d, c0 + kChannelBlock); ++c) {
                    if (a.overlap) {
                        for (int64_t sl = 0; sl < rate; ++sl) {
                            if (w == 0) {
                                val[sl] = 0.0f;
                                logit[sl] = -std::numeric_limits<float>::infinity();
                            } else if (w == first_w) {  // previous window closed in an earlier call
                                val[sl] = row(a.ovl_kv, sl)[c];
                                logit[sl] = row(a.ovl_gate, sl)[c];
                            } else {
                                token((w - 1) * rate + sl, c, val[sl], logit[sl]);
                            }
                            token(w * rate + sl, d + c, val[rate + sl], logit[rate + sl]);
                        }
                    } else {
                        for (int64_t sl = 0; sl < rate; ++sl) token(w * rate + sl, c, val[sl], logit[sl]);
                    }
                    double m = -std::numeric_limits<double>::infinity();
                    for (int64_t sl = 0; sl < n_slots; ++sl) m = std::max(m, double(logit[sl]));
                    double denom = 0, acc = 0;
                    for (int64_t sl = 0; sl < n_slots; ++sl)
                        denom += (ex[sl] = std::exp(double(logit[sl]) - m));
                    for (int64_t sl = 0; sl < n_slots; ++sl) acc += double(float(ex[sl] / denom)) * val[sl];
                    row(a.out, entry)[c] = float(acc);
                }
            }
        });
    if (a.overlap && n_new > 0) {  // a-half of the last closed window, logits with bias
        const int64_t w = first_w + n_new - 1;
        for (int64_t sl = 0; sl < rate; ++sl)
            for (int64_t c = 0; c < d; ++c)
                token(w * rate + sl, c, row(a.ovl_kv, sl)[c], row(a.ovl_gate, sl)[c]);
    }
    // Tokens of the open window stay buffered (without bias), in slot position % rate.
    const int64_t open_start = (a.pos0 + L) / rate * rate;
    for (int64_t t = std::max<int64_t>(0, open_start - a.pos0); t < L; ++t) {
        const int64_t slot = (a.pos0 + t) % rate, width = a.kv.shape[1];
        std::copy_n(row(a.kv, t), width, row(a.buf_kv, slot));
        std::copy_n(row(a.gate, t), width, row(a.buf_gate, slot));
    }
}

}  // namespace di::ops
