// Errors from the outside world travel as values (Result<T>); broken invariants abort (check.h).
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace di {

enum class ErrorCode { kInvalidArgument, kNotFound, kIo, kFormat, kUnsupported, kOutOfRange, kCapacity };

struct Error {
    ErrorCode code = ErrorCode::kInvalidArgument;
    std::string message;
};

// Outside text quoted in an error or a log line (a request's field name, a role, a path): control bytes as
// '?' and at most `max` bytes, then "...", so the message stays one bounded line.
inline std::string quote_line(std::string_view text, size_t max) {
    std::string s(text.substr(0, max));
    for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return text.size() > max ? s + "..." : s;
}

template <typename... A>
Error make_error(ErrorCode code, fmt::format_string<A...> f, A&&... args) {
    return Error{code, fmt::format(f, std::forward<A>(args)...)};
}

// A value or an Error. Deliberately small: has_value(), value(), error(), and DI_TRY for propagation.
template <typename T>
class [[nodiscard]] Result {
  public:
    Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
    Result(Error error) : v_(std::move(error)) {}  // NOLINT
    bool ok() const { return v_.index() == 0; }
    explicit operator bool() const { return ok(); }
    T& value() & { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    const T& value() const& { return std::get<0>(v_); }
    const Error& error() const { return std::get<1>(v_); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() { return value(); }

  private:
    std::variant<T, Error> v_;
};

struct Ok {};
using Status = Result<Ok>;
inline Status ok_status() { return Ok{}; }

}  // namespace di

// Evaluate a Result expression; on error return it from the enclosing function.
#define DI_TRY_CONCAT_(a, b) a##b
#define DI_TRY_NAME_(line) DI_TRY_CONCAT_(di_try_, line)
#define DI_TRY(decl, expr)                                                   \
    auto DI_TRY_NAME_(__LINE__) = (expr);                                    \
    if (!DI_TRY_NAME_(__LINE__).ok()) return DI_TRY_NAME_(__LINE__).error(); \
    decl = std::move(DI_TRY_NAME_(__LINE__).value())
#define DI_TRY_STATUS(expr)                    \
    do {                                       \
        auto di_s_ = (expr);                   \
        if (!di_s_.ok()) return di_s_.error(); \
    } while (0)
