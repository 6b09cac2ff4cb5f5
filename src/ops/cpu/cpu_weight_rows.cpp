// Where a quantised weight's rows and scales sit in memory: a block's scale as f32, and the rows the decode
// tiles ask the memory for ahead of their use.
#include <algorithm>
#include <bit>
#include <cmath>

#include "ops/cpu/cpu_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace di::ops::cpu {
namespace {

int64_t stored_row_bytes(const QWeight& w) {  // the bytes of one row's values (fp4: two per byte)
    return w.format == WeightFormat::kFp4Group ? w.in_dim / 2 : w.in_dim * int64_t(dtype_size(w.data.dtype));
}

}  // namespace

float load_scale(const TensorView& s, int64_t r, int64_t c) {
    const int64_t i = r * s.stride[0] + c * s.stride[1];
    if (s.dtype != DType::kE8M0) return s.ptr<float>()[i];
    const uint32_t b = s.ptr<uint8_t>()[i];  // 2^(b - 127) as e8m0_to_f32, without ldexp
    return b == 0 ? 0x1p-127f : b == 255 ? NAN : std::bit_cast<float>(b << 23);
}

// At decode a thread streams its tiles one after another, and without asking ahead it waits on each row's
// loads (a demo-model decode on one thread: 97 -> 130-174 tokens/s with the next tile requested pair by
// pair). The AVX2 fused tiles ask for the pair kPrefetchRows ahead of the one they compute: of 2, 4, 16, 32
// and 48 rows ahead, 4 measured best on both the demo (512-byte head rows) and the mid-fullvocab model (2 KiB
// head rows), within the noise, on an Intel VM. The AVX-512 tiles stream row_ahead's rows instead.
void prefetch_rows(const QWeight& w, int64_t o, int64_t n, int64_t c0, int64_t c1) {
#if defined(__x86_64__)
    const int64_t end = std::min(o + n, w.out_dim);
    if (o >= end) return;
    const int64_t stride = w.data.stride[0] * int64_t(dtype_size(w.data.dtype)), bytes = stored_row_bytes(w);
    const int64_t b0 = c0 * bytes / w.in_dim,
                  b1 = c1 < 0 ? bytes : c1 * bytes / w.in_dim;  // columns as bytes
    const char* row = static_cast<const char*>(w.data.data) + o * stride;
    for (; o < end; ++o, row += stride)
        for (int64_t c = b0; c < b1; c += 64) _mm_prefetch(row + c, _MM_HINT_T0);
#else
    (void)w, (void)o, (void)n, (void)c0, (void)c1;
#endif
}

const uint8_t* row_ahead(const QWeight& w, int64_t o) {
    o += std::max<int64_t>(kPrefetchRows, kPrefetchBytes / std::max<int64_t>(stored_row_bytes(w), 1));
    if (o >= w.out_dim) return nullptr;
    return static_cast<const uint8_t*>(w.data.data) +
           o * w.data.stride[0] * int64_t(dtype_size(w.data.dtype));
}

}  // namespace di::ops::cpu
