// Reference compressor (HCA and CSA/indexer variants): gated softmax pooling of aligned windows.
#include "ops/ref/ref_compressor.h"

#include <cmath>
#include <limits>
#include <vector>

#include "ops/ref/ref_backend_impl.h"

namespace di::ops {
namespace {

// Value and logit (bias included) of channel c of the token at position q.
void token(const CompressArgs& a, int64_t q, int64_t c, float& value, float& logit) {
    const float* kv = q < a.pos0 ? row_f32(a.buf_kv, q % a.rate) : row_f32(a.kv, q - a.pos0);
    const float* gate = q < a.pos0 ? row_f32(a.buf_gate, q % a.rate) : row_f32(a.gate, q - a.pos0);
    value = kv[c];
    logit = gate[c] + row_f32(a.bias, q % a.rate)[c];
}

}  // namespace

void compress_entries(const CompressArgs& a, int64_t e, int64_t c0, int64_t c1) {
    const int64_t rate = a.rate, d = a.out.shape[1], w = a.pos0 / rate + e;
    const int64_t n_slots = a.overlap ? 2 * rate : rate;
    std::vector<float> val(static_cast<size_t>(n_slots)), logit(static_cast<size_t>(n_slots));
    std::vector<double> ex(static_cast<size_t>(n_slots));
    for (int64_t c = c0; c < c1; ++c) {
        if (a.overlap) {
            for (int64_t s = 0; s < rate; ++s) {
                if (w == 0) {
                    val[size_t(s)] = 0.0f;
                    logit[size_t(s)] = -std::numeric_limits<float>::infinity();
                } else if (w == a.pos0 / rate) {  // previous window closed in an earlier call
                    val[size_t(s)] = row_f32(a.ovl_kv, s)[c];
                    logit[size_t(s)] = row_f32(a.ovl_gate, s)[c];
                } else {
                    token(a, (w - 1) * rate + s, c, val[size_t(s)], logit[size_t(s)]);
                }
                token(a, w * rate + s, d + c, val[size_t(rate + s)], logit[size_t(rate + s)]);
            }
        } else {
            for (int64_t s = 0; s < rate; ++s) token(a, w * rate + s, c, val[size_t(s)], logit[size_t(s)]);
        }
        double m = -std::numeric_limits<double>::infinity();
        for (float g : logit) m = std::max(m, double(g));
        double denom = 0, acc = 0;
        for (int64_t s = 0; s < n_slots; ++s)
            denom += (ex[size_t(s)] = std::exp(double(logit[size_t(s)]) - m));
        for (int64_t s = 0; s < n_slots; ++s) acc += double(float(ex[size_t(s)] / denom)) * val[size_t(s)];
        row_f32(a.out, e)[c] = float(acc);
    }
}

void compress_store_state(const CompressArgs& a) {
    const int64_t L = a.kv.shape[0], rate = a.rate, d = a.out.shape[1], n_new = a.out.shape[0];
    if (a.overlap && n_new > 0) {  // a-half of the last closed window, logits with bias
        const int64_t w = a.pos0 / rate + n_new - 1;
        for (int64_t s = 0; s < rate; ++s)
            for (int64_t c = 0; c < d; ++c)
                token(a, w * rate + s, c, row_f32(a.ovl_kv, s)[c], row_f32(a.ovl_gate, s)[c]);
    }
    // Tokens of the open window stay buffered (without bias), in slot position % rate.
    const int64_t open_start = (a.pos0 + L) / rate * rate;
    for (int64_t t = std::max<int64_t>(0, open_start - a.pos0); t < L; ++t) {
        const int64_t slot = (a.pos0 + t) % rate, width = a.kv.shape[1];
        for (int64_t c = 0; c < width; ++c) {
            row_f32(a.buf_kv, slot)[c] = row_f32(a.kv, t)[c];
            row_f32(a.buf_gate, slot)[c] = row_f32(a.gate, t)[c];
        }
    }
}

void RefBackend::compress(const CompressArgs& a) {
    check(a);
    for (int64_t e = 0; e < a.out.shape[0]; ++e) compress_entries(a, e, 0, a.out.shape[1]);
    compress_store_state(a);
}

}  // namespace di::ops
