// One access line per HTTP request (request id, method, path, status, prompt and completion tokens, time to
// first token, total time; the error message of a failed request), written to stderr when the log level
// lets it: info logs every request, warn only 4xx/5xx, error only 5xx, debug also the notes of
// `AccessLog::debug` (fields accepted and ignored, say).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace di::server {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };
std::optional<LogLevel> parse_log_level(std::string_view s);  // error | warn | info | debug

// What a generation request produced (-1: not known, e.g. a request that never reached the engine).
struct RequestUsage {
    int64_t prompt_tokens = -1, completion_tokens = -1;
    int64_t cached_tokens = 0;  // of the prompt, restored from the prefix cache (logged when > 0)
    double ttft_s = -1;         // submission to the first generated token
};

struct AccessRecord {
    std::string id, method, path;
    int status = 0;
    RequestUsage usage;
    double total_s = 0;
    std::string error;  // the API error's message, for status >= 400
};

std::string access_line(const AccessRecord& r);

class AccessLog {
  public:
    explicit AccessLog(LogLevel level) : level_(level) {}
    bool wants(int status) const;
    void write(const AccessRecord& r);
    void debug(std::string_view request_id, std::string_view note);
    LogLevel level() const { return level_; }

  private:
    LogLevel level_;
    std::mutex mu_;  // one line at a time from the worker threads
};

}  // namespace di::server
