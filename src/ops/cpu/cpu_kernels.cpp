// Dequantisation by bit manipulation (vectorisable, exact) and 16-lane float dot products. Each hot
// function is cloned for AVX-512, AVX2 and baseline x86-64; with -ffp-contract=off all clones round alike.
#include "ops/cpu/cpu_kernels.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

namespace di::ops::cpu {
namespace {

#if defined(__x86_64__) && !defined(__clang__)
#define DI_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DI_CPU_CLONES
#endif

constexpr int kLanes = 16;
typedef float v16 __attribute__((vector_size(kLanes * sizeof(float))));

[[gnu::always_inline]] inline v16 load16(const float* p) {
    v16 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Fixed folding tree: lane j += lane j + w for w = 8, 4, 2, 1.
[[gnu::always_inline]] inline float fold(v16 a) {
    float t[kLanes];
    std::memcpy(t, &a, sizeof t);
    for (int w = kLanes / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) t[j] += t[j + w];
    return t[0];
}

float load_scale(const TensorView& s, int64_t r, int64_t c) {
    const int64_t i = r * s.stride[0] + c * s.stride[1];
    return s.dtype == DType::kE8M0 ? e8m0_to_f32(s.ptr<uint8_t>()[i]) : s.ptr<float>()[i];
}

const float* f16_table() {
    static const std::vector<float> t = [] {
        std::vector<float> v(65536);
        for (uint32_t h = 0; h < 65536; ++h) v[h] = f16_to_f32(uint16_t(h));
        return v;
    }();
    return t.data();
}

// e4m3 byte -> f32: put exponent and mantissa in f32 position, scale by 2^(127-7) (also right for the
// subnormals, which land on f32 subnormals); 0x7f/0xff are NaN.
DI_CPU_CLONES void dequant_fp8(const uint8_t* q, int64_t n, float s, float* d) {
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t b = q[i];
        float f = std::bit_cast<float>(((b & 0x80u) << 24) | ((b & 0x7fu) << 20)) * 0x1p120f;
        f = (b & 0x7fu) == 0x7fu ? NAN : f;
        d[i] = f * s;
    }
}

// e2m1 nibble -> f32 the same way (2^(127-1)); low nibble is the even column.
DI_CPU_CLONES void dequant_fp4(const uint8_t* q, int64_t n_bytes, float s, float* d) {
    for (int64_t i = 0; i < n_bytes; ++i) {
        const uint32_t lo = q[i] & 0xfu, hi = q[i] >> 4;
        d[2 * i] = std::bit_cast<float>(((lo & 8u) << 28) | ((lo & 7u) << 22)) * 0x1p126f * s;
        d[2 * i + 1] = std::bit_cast<float>(((hi & 8u) << 28) | ((hi & 7u) << 22)) * 0x1p126f * s;
    }
}

DI_CPU_CLONES void dequant_bf16(const uint16_t* q, int64_t n, float* d) {
    for (int64_t i = 0; i < n; ++i) d[i] = std::bit_cast<float>(uint32_t(q[i]) << 16);
}

void dequant_row(const QWeight& w, int64_t o, float* d) {
    const int64_t in = w.in_dim;
    switch (w.format) {
        case WeightFormat::kDense: {
            const int64_t off = o * w.data.stride[0];
            if (w.data.dtype == DType::kF32) {
                std::memcpy(d, w.data.ptr<float>() + off, size_t(in) * sizeof(float));
            } else if (w.data.dtype == DType::kBF16) {
                dequant_bf16(w.data.ptr<uint16_t>() + off, in, d);
            } else {
                DI_CHECK(w.data.dtype == DType::kF16, "linear: dense weight dtype {}", dtype_name(w.data.dtype));
                const float* t = f16_table();
                const uint16_t* q = w.data.ptr<uint16_t>() + off;
                for (int64_t i = 0; i < in; ++i) d[i] = t[q[i]];
            }
            return;
        }
        case WeightFormat::kFp8Block: {
            const uint8_t* q = w.data.ptr<uint8_t>() + o * w.data.stride[0];
            for (int64_t i = 0; i < in; i += kFp8Block)
                dequant_fp8(q + i, std::min(kFp8Block, in - i), load_scale(w.scale, o / kFp8Block, i / kFp8Block),
                            d + i);
            return;
        }
        case WeightFormat::kFp4Group: {
            DI_CHECK(in % 2 == 0, "fp4 weight with odd in_dim {}", in);
            const uint8_t* q = w.data.ptr<uint8_t>() + o * w.data.stride[0];
            for (int64_t i = 0; i < in; i += kFp4Group)
                dequant_fp4(q + i / 2, std::min(kFp4Group, in - i) / 2, load_scale(w.scale, o, i / kFp4Group), d + i);
            return;
        }
    }
}

// Two input rows against kTileRows weight rows; 8 lane accumulators.
[[gnu::always_inline]] inline void dots_2x4(const float* x0, const float* x1, const float* const* w, int64_t len, float* r0, float* r1) {
    v16 a00{}, a01{}, a02{}, a03{}, a10{}, a11{}, a12{}, a13{};
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes) {
        const v16 u = load16(x0 + i), v = load16(x1 + i);
        const v16 w0 = load16(w[0] + i), w1 = load16(w[1] + i), w2 = load16(w[2] + i), w3 = load16(w[3] + i);
        a00 += u * w0, a01 += u * w1, a02 += u * w2, a03 += u * w3;
        a10 += v * w0, a11 += v * w1, a12 += v * w2, a13 += v * w3;
    }
    for (int64_t j = 0; i + j < len; ++j) {  // tail into lanes 0..len%16-1, as in dots_1x4
        a00[j] += x0[i + j] * w[0][i + j], a01[j] += x0[i + j] * w[1][i + j];
        a02[j] += x0[i + j] * w[2][i + j], a03[j] += x0[i + j] * w[3][i + j];
        a10[j] += x1[i + j] * w[0][i + j], a11[j] += x1[i + j] * w[1][i + j];
        a12[j] += x1[i + j] * w[2][i + j], a13[j] += x1[i + j] * w[3][i + j];
    }
    r0[0] = fold(a00), r0[1] = fold(a01), r0[2] = fold(a02), r0[3] = fold(a03);
    r1[0] = fold(a10), r1[1] = fold(a11), r1[2] = fold(a12), r1[3] = fold(a13);
}

[[gnu::always_inline]] inline void dots_1x4(const float* x0, const float* const* w, int64_t len, float* r0) {
    v16 a0{}, a1{}, a2{}, a3{};
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes) {
        const v16 u = load16(x0 + i);
        a0 += u * load16(w[0] + i), a1 += u * load16(w[1] + i);
        a2 += u * load16(w[2] + i), a3 += u * load16(w[3] + i);
    }
    for (int64_t j = 0; i + j < len; ++j) {
        a0[j] += x0[i + j] * w[0][i + j], a1[j] += x0[i + j] * w[1][i + j];
        a2[j] += x0[i + j] * w[2][i + j], a3[j] += x0[i + j] * w[3][i + j];
    }
    r0[0] = fold(a0), r0[1] = fold(a1), r0[2] = fold(a2), r0[3] = fold(a3);
}

}  // namespace

void dequant_rows(const QWeight& w, int64_t o0, int64_t nrows, float* dst, int64_t ld) {
    for (int64_t r = 0; r < nrows; ++r) dequant_row(w, o0 + r, dst + r * ld);
}

DI_CPU_CLONES void dot_tile(const float* const* x, int64_t nx, const float* const* w, int64_t len, float* res) {
    int64_t r = 0;
    for (; r + 2 <= nx; r += 2) dots_2x4(x[r], x[r + 1], w, len, res + r * kTileRows, res + (r + 1) * kTileRows);
    if (r < nx) dots_1x4(x[r], w, len, res + r * kTileRows);
}

void weight_tile(const QWeight& w, int64_t o0, int64_t nw, const float* const* x, int64_t nx, CpuScratch& s,
                 float* res) {
    const int64_t in = w.in_dim;
    const float* rows[kTileRows];
    if (w.format == WeightFormat::kDense && w.data.dtype == DType::kF32) {
        for (int64_t k = 0; k < kTileRows; ++k) rows[k] = w.data.ptr<float>() + (o0 + std::min(k, nw - 1)) * w.data.stride[0];
    } else {
        if (s.w.size() < size_t(kTileRows * in)) s.w.resize(size_t(kTileRows * in));
        dequant_rows(w, o0, nw, s.w.data(), in);
        for (int64_t k = 0; k < kTileRows; ++k) rows[k] = s.w.data() + std::min(k, nw - 1) * in;
    }
    dot_tile(x, nx, rows, w.in_dim, res);
}

}  // namespace di::ops::cpu
