// Ceilings measured in the same run as the op benchmark: device copy bandwidth and the cuBLASLt dense
// BF16 / FP8 matrix rate (libcublasLt is loaded at run time, so the binary does not depend on it).
#pragma once

#include <string>

namespace di::bench {

struct Roofline {
    double copy_gbps = 0;    // bytes read + written per second, / 1e9
    double bf16_tflops = 0;  // 0 when cuBLASLt is unavailable
    double fp8_tflops = 0;
    std::string note;  // what could not be measured and why
};

// Measures on the current device; `gemm_n` is the square size of the matrix products.
Roofline measure_roofline(int gemm_n = 8192);

}  // namespace di::bench
