// Typed access to config.json fields with transformers' strict typing (huggingface_hub @strict):
// int fields reject floats and booleans, float fields reject integers, null only where the field is Optional.
// Every error is one line: "<source>: field '<name>': expected ..., got <type> <value>".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/error.h"

namespace di::model::detail {

class ConfigFields {
  public:
    ConfigFields(const nlohmann::json& obj, std::string source, std::string prefix = "")
        : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

    // nullptr when the key is absent.
    const nlohmann::json* find(const std::string& key) const;
    // Full field name for messages: prefix + key ("rope_parameters.compress.factor").
    std::string name(const std::string& key) const { return prefix_ + key; }
    Error error(const std::string& key, const std::string& what) const;
    Error type_error(const std::string& key, const char* expected, const nlohmann::json& got) const;

    Result<int64_t> integer(const std::string& key, int64_t dflt) const;   // JSON integer; absent -> dflt
    Result<int64_t> positive(const std::string& key, int64_t dflt) const;  // integer > 0
    Result<double> real(const std::string& key, double dflt) const;        // JSON float only
    Result<double> number(const std::string& key, double dflt) const;      // float or integer
    Result<bool> boolean(const std::string& key, bool dflt) const;
    Result<std::string> string(const std::string& key, const std::string& dflt) const;
    // Optional variants: absent or null -> nullopt.
    Result<std::optional<int64_t>> opt_integer(const std::string& key) const;
    Result<std::optional<double>> opt_real(const std::string& key) const;
    Result<std::optional<double>> opt_number(const std::string& key) const;
    Result<std::optional<std::string>> opt_string(const std::string& key) const;

    const std::string& source() const { return source_; }

  private:
    const nlohmann::json& obj_;
    std::string source_;
    std::string prefix_;
};

}  // namespace di::model::detail
