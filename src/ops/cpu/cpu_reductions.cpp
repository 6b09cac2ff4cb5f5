// The CPU backend's reductions outside the linears: attention's probability-weighted sum of value rows, and
// the double-precision dots and squared norms of mHC. Fixed orders, so thread counts and batches keep the
// bits.
#include <cstring>

#include "ops/cpu/cpu_kernels.h"

namespace di::ops::cpu {
namespace {

typedef double v8d __attribute__((vector_size(8 * sizeof(double))));

[[gnu::always_inline]] inline double fold8(v8d a) {
    double t[8];
    std::memcpy(t, &a, sizeof t);
    for (int w = 4; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) t[j] += t[j + w];
    return t[0];
}

[[gnu::always_inline]] inline v8d load8d(const float* p) {
    v8d v;
    for (int j = 0; j < 8; ++j) v[j] = p[j];
    return v;
}

}  // namespace

DI_CPU_CLONES void weighted_row_sum(const float* const* rows, const float* p, int64_t n, int64_t len,
                                    float* out) {
    for (int64_t c = 0; c < len; ++c) out[c] = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        const float* r = rows[j];
        const float pj = p[j];
#pragma omp simd
        for (int64_t c = 0; c < len; ++c) out[c] += pj * r[c];
    }
}

namespace {

typedef float v16f __attribute__((vector_size(16 * sizeof(float))));

template <int NH>
[[gnu::always_inline]] inline void weighted_rows_sum_n(const float* const* rows, const float* p, int64_t ldp,
                                                       int64_t n, int64_t len, float* out, int64_t ldo) {
    int64_t c = 0;
    for (; c + 16 <= len; c += 16) {
        v16f acc[NH] = {};
        for (int64_t j = 0; j < n; ++j) {
            v16f r;
            std::memcpy(&r, rows[j] + c, sizeof r);
            for (int h = 0; h < NH; ++h) acc[h] += p[h * ldp + j] * r;  // multiply, then add: as out[c] +=
        }
        for (int h = 0; h < NH; ++h) std::memcpy(out + h * ldo + c, &acc[h], sizeof acc[h]);
    }
    for (; c < len; ++c)
        for (int h = 0; h < NH; ++h) {
            float acc = 0.0f;
            for (int64_t j = 0; j < n; ++j) acc += p[h * ldp + j] * rows[j][c];
            out[h * ldo + c] = acc;
        }
}

}  // namespace

DI_CPU_CLONES void weighted_rows_sum(const float* const* rows, const float* p, int64_t ldp, int nh, int64_t n,
                                     int64_t len, float* out, int64_t ldo) {
    switch (nh) {
        case 1:
            return weighted_rows_sum_n<1>(rows, p, ldp, n, len, out, ldo);
        case 2:
            return weighted_rows_sum_n<2>(rows, p, ldp, n, len, out, ldo);
        case 3:
            return weighted_rows_sum_n<3>(rows, p, ldp, n, len, out, ldo);
        default:
            return weighted_rows_sum_n<4>(rows, p, ldp, n, len, out, ldo);
    }
}

// Four rows at a time: four independent accumulator chains (one chain waits on its add's latency) and a's
// chunk converted once for the four; each row's lanes, tail and fold as one row alone.
DI_CPU_CLONES void dot_rows_f64(const float* a, const float* const* rows, int64_t n_rows, int64_t len,
                                double* res) {
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        const float *b0 = rows[r], *b1 = rows[r + 1], *b2 = rows[r + 2], *b3 = rows[r + 3];
        v8d acc0{}, acc1{}, acc2{}, acc3{};
        int64_t i = 0;
        for (; i + 8 <= len; i += 8) {
            const v8d x = load8d(a + i);
            acc0 += x * load8d(b0 + i), acc1 += x * load8d(b1 + i);
            acc2 += x * load8d(b2 + i), acc3 += x * load8d(b3 + i);
        }
        for (int64_t j = 0; i + j < len; ++j) {
            const double x = a[i + j];
            acc0[j] += x * double(b0[i + j]), acc1[j] += x * double(b1[i + j]);
            acc2[j] += x * double(b2[i + j]), acc3[j] += x * double(b3[i + j]);
        }
        res[r] = fold8(acc0), res[r + 1] = fold8(acc1), res[r + 2] = fold8(acc2), res[r + 3] = fold8(acc3);
    }
    for (; r < n_rows; ++r) {
        const float* b = rows[r];
        v8d acc{};
        int64_t i = 0;
        for (; i + 8 <= len; i += 8) acc += load8d(a + i) * load8d(b + i);
        for (int64_t j = 0; i + j < len; ++j) acc[j] += double(a[i + j]) * double(b[i + j]);
        res[r] = fold8(acc);
    }
}

DI_CPU_CLONES double sumsq_f64(const float* a, int64_t len) {
    v8d acc{};
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        const v8d x = load8d(a + i);
        acc += x * x;
    }
    for (int64_t j = 0; i + j < len; ++j) acc[j] += double(a[i + j]) * double(a[i + j]);
    return fold8(acc);
}

}  // namespace di::ops::cpu
