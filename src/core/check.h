// Invariant checks: a failed DI_CHECK is a bug in deepinfer, so it reports file:line and aborts.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

namespace di::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
    std::fprintf(stderr, "deepinfer: internal error at %s:%d: check '%s' failed: %s\n", file, line, cond,
                 msg.c_str());
    std::fflush(stderr);
    std::abort();
}
}  // namespace di::detail

#define DI_CHECK(cond, ...)                                                                           \
    do {                                                                                              \
        if (!(cond)) ::di::detail::check_failed(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
    } while (0)
