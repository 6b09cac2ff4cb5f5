#include "server/access_log.h"

#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

namespace di::server {

std::optional<LogLevel> parse_log_level(std::string_view s) {
    if (s == "error") return LogLevel::kError;
    if (s == "warn") return LogLevel::kWarn;
    if (s == "info") return LogLevel::kInfo;
    if (s == "debug") return LogLevel::kDebug;
    return std::nullopt;
}

std::string access_line(const AccessRecord& r) {
    std::string s = fmt::format("deepinfer: {} {} {} {}", r.id, r.method, r.path, r.status);
    if (r.usage.prompt_tokens >= 0) s += fmt::format(" prompt_tokens={}", r.usage.prompt_tokens);
    if (r.usage.cached_tokens > 0) s += fmt::format(" cached_tokens={}", r.usage.cached_tokens);
    if (r.usage.completion_tokens >= 0) s += fmt::format(" completion_tokens={}", r.usage.completion_tokens);
    if (r.usage.ttft_s >= 0) s += fmt::format(" ttft={:.3f}s", r.usage.ttft_s);
    s += fmt::format(" total={:.3f}s", r.total_s);
    if (!r.error.empty()) {  // quoted as a JSON string: one line whatever the message holds
        s += " error=" +
             nlohmann::json(r.error).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    return s;
}

bool AccessLog::wants(int status) const {
    switch (level_) {
        case LogLevel::kError:
            return status >= 500;
        case LogLevel::kWarn:
            return status >= 400;
        default:
            return true;
    }
}

void AccessLog::write(const AccessRecord& r) {
    if (!wants(r.status)) return;
    const std::string line = access_line(r) + "\n";
    std::lock_guard lk(mu_);
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
}

void AccessLog::debug(std::string_view request_id, std::string_view note) {
    if (level_ < LogLevel::kDebug) return;
    const std::string line = fmt::format("deepinfer: {} debug: {}\n", request_id, note);
    std::lock_guard lk(mu_);
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
}

}  // namespace di::server
