// The one CUDA runtime check, for host code, .cu files and the benchmarks alike: a failing call is a bug or a
// broken device, so it prints "deepinfer: CUDA error at FILE:LINE: CALL: MESSAGE" and aborts.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define DI_CUDA_CHECK(expr)                                                                             \
    do {                                                                                                \
        const cudaError_t e_ = (expr);                                                                  \
        if (e_ != cudaSuccess) {                                                                        \
            std::fprintf(stderr, "deepinfer: CUDA error at %s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                         cudaGetErrorString(e_));                                                       \
            std::abort();                                                                               \
        }                                                                                               \
    } while (0)
