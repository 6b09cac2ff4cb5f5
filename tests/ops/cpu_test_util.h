// Helpers for the CPU op tests: seeded random tensors in every weight format, and the element-wise check
// |cpu - ref| <= bound, where the bound is derived per element from the float summation error (see
// float_sum_tol) and the case's magnitudes, not guessed.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/cpu/cpu_backend.h"
#include "ops/op_cases.h"
#include "ops/ref/ref_backend.h"

namespace di::cputest {

struct Backends {
    std::unique_ptr<ops::Backend> ref = ops::make_ref_backend();
    std::unique_ptr<ops::CpuBackend> cpu = std::make_unique<ops::CpuBackend>(2);
};
Backends& backends();  // one pair per process

std::mt19937& rng();

// Uniform in [lo, hi) for f32/bf16 (rounded to nearest); f16 gets random finite halves of magnitude < 1.
void fill_uniform(const TensorView& v, float lo = -1.0f, float hi = 1.0f);
// Random e4m3 bytes without the NaN codes 0x7f/0xff.
void fill_fp8(const TensorView& v);
// Random bytes (every fp4 pair is a valid value).
void fill_bytes(const TensorView& v);
// e8m0 scales 2^-6 .. 2^0.
void fill_e8m0(const TensorView& v);
// NaN bytes, so an element an op does not write cannot pass.
void poison(const TensorView& v);

// A weight in one format with owned storage; `full_out` rows are stored, the view may be a row slice.
struct TestWeight {
    Tensor data, scale;
    ops::QWeight w;
};
TestWeight make_weight(ops::WeightFormat fmt, int64_t out, int64_t in, DType dense_dt = DType::kBF16,
                       DType scale_dt = DType::kE8M0);

// Worst-case relative error of a float sum of `len` products as the cpu kernels do it: ceil(len/16)
// products+adds per lane, 4 folding adds, plus one rounding of ref's double result: (ceil(len/16) + 6) u,
// u = 2^-24, 1% headroom for the second-order terms (the case table's bound, ops/op_cases.h).
inline double float_sum_tol(int64_t len) { return ops::cases::float_sum_bound(len); }

// Expects |got[i] - want[i]| <= bound[i] for all i (NaN never passes), and a relative L2 error <= 1e-5
// (float rounding of random sign: ~sqrt(len/16) u |terms|/|sum| ~ 1e-6 here); reports the worst element.
void expect_within(const std::vector<float>& want, const std::vector<float>& got,
                   const std::vector<double>& bound, const std::string& what);

std::vector<float> to_vector(const TensorView& v);  // contiguous f32 or bf16 view, as f32

}  // namespace di::cputest
