#include "model/config_fields.h"

#include "io/json_text.h"

namespace di::model::detail {

using nlohmann::json;

const json* ConfigFields::find(const std::string& key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
}

Error ConfigFields::error(const std::string& key, const std::string& what) const {
    return make_error(ErrorCode::kFormat, "{}: field '{}': {}", source_, name(key), what);
}

Error ConfigFields::type_error(const std::string& key, const char* expected, const json& got) const {
    return error(key, fmt::format("expected {}, got {}", expected, io::describe_json(got)));
}

static bool is_int(const json& v) {
    return v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX));
}

Result<std::optional<int64_t>> ConfigFields::opt_integer(const std::string& key) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return std::optional<int64_t>();
    if (!is_int(*v)) return type_error(key, "an integer", *v);
    return std::optional<int64_t>(v->get<int64_t>());
}

Result<int64_t> ConfigFields::integer(const std::string& key, int64_t dflt) const {
    const json* v = find(key);
    if (v == nullptr) return dflt;
    if (!is_int(*v)) return type_error(key, "an integer", *v);
    return v->get<int64_t>();
}

Result<int64_t> ConfigFields::positive(const std::string& key, int64_t dflt) const {
    DI_TRY(int64_t x, integer(key, dflt));
    if (x <= 0) return error(key, fmt::format("must be > 0, got {}", x));
    return x;
}

Result<std::optional<double>> ConfigFields::opt_real(const std::string& key) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return std::optional<double>();
    if (v->is_number_integer())  // transformers' strict dataclass rejects int for float fields
        return error(key,
                     fmt::format("expected a float, got {} (transformers rejects integers here; write {}.0)",
                                 io::describe_json(*v), v->dump()));
    if (!v->is_number_float()) return type_error(key, "a float", *v);
    return std::optional<double>(v->get<double>());
}

Result<double> ConfigFields::real(const std::string& key, double dflt) const {
    const json* v = find(key);
    if (v == nullptr) return dflt;
    if (v->is_null()) return type_error(key, "a float", *v);
    DI_TRY(std::optional<double> x, opt_real(key));
    return *x;
}

Result<std::optional<double>> ConfigFields::opt_number(const std::string& key) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return std::optional<double>();
    if (!v->is_number()) return type_error(key, "a number", *v);
    return std::optional<double>(v->get<double>());
}

Result<double> ConfigFields::number(const std::string& key, double dflt) const {
    const json* v = find(key);
    if (v == nullptr) return dflt;
    if (!v->is_number()) return type_error(key, "a number", *v);
    return v->get<double>();
}

Result<bool> ConfigFields::boolean(const std::string& key, bool dflt) const {
    const json* v = find(key);
    if (v == nullptr) return dflt;
    if (!v->is_boolean()) return type_error(key, "true or false", *v);
    return v->get<bool>();
}

Result<std::optional<std::string>> ConfigFields::opt_string(const std::string& key) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return std::optional<std::string>();
    if (!v->is_string()) return type_error(key, "a string", *v);
    return std::optional<std::string>(v->get<std::string>());
}

Result<std::string> ConfigFields::string(const std::string& key, const std::string& dflt) const {
    const json* v = find(key);
    if (v == nullptr) return dflt;
    if (!v->is_string()) return type_error(key, "a string", *v);
    return v->get<std::string>();
}

}  // namespace di::model::detail
