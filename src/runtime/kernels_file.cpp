#include "runtime/kernels_file.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "io/json_text.h"
#include "io/mmap_file.h"

namespace di::runtime {

Result<ops::AllowList> parse_kernels_file(const std::string& text, const std::string& source,
                                          const ops::Backend& backend) {
    using nlohmann::json;
    DI_TRY(json j, io::parse_json_text(text, source));
    auto bad = [&](const std::string& what) {
        return make_error(ErrorCode::kFormat, "{}: {}", source, what);
    };
    if (!j.is_object() || !j.contains("backend") || !j["backend"].is_string() || !j.contains("allow") ||
        !j["allow"].is_array())
        return bad("expected {\"backend\": NAME, \"allow\": [{\"op\": ..., \"variant\": ...}, ...]}");
    const std::string name = j["backend"].get<std::string>();
    if (name != backend.name())
        return bad(fmt::format("written for backend {}, but this run uses {}", io::quoted(name),
                               io::quoted(backend.name())));
    const std::vector<ops::KernelVariant> known = backend.kernel_variants();
    ops::AllowList list = ops::AllowList::fallbacks_of(std::string(backend.name()), known);
    for (size_t i = 0; i < j["allow"].size(); ++i) {
        const json& e = j["allow"][i];
        if (!e.is_object() || !e.contains("op") || !e["op"].is_string() || !e.contains("variant") ||
            !e["variant"].is_string())
            return bad(fmt::format("allow[{}]: expected {{\"op\": NAME, \"variant\": NAME}}, got {}", i,
                                   io::describe_json(e)));
        const std::string op = e["op"].get<std::string>(), variant = e["variant"].get<std::string>();
        std::string of_op;
        bool found = false;
        for (const ops::KernelVariant& v : known)
            if (v.op == op) {
                of_op += (of_op.empty() ? "" : ", ") + v.name;
                found |= v.name == variant;
            }
        if (of_op.empty()) return bad(fmt::format("allow[{}]: unknown op {}", i, io::quoted(op)));
        if (!found)
            return bad(fmt::format("allow[{}]: op {} has no variant {} on {} ({})", i, io::quoted(op),
                                   io::quoted(variant), backend.name(), of_op));
        list.allow(op, variant);
    }
    return list;
}

Status apply_kernels_file(const std::string& path, ops::Backend& backend) {
    DI_TRY(std::string text, io::read_text_file(path));
    DI_TRY(ops::AllowList list, parse_kernels_file(text, path, backend));
    backend.set_allow_list(list);
    return ok_status();
}

std::string kernels_file_text(const ops::AllowList& list) {
    nlohmann::json allow = nlohmann::json::array();
    for (const auto& [op, variant] : list.pairs()) allow.push_back({{"op", op}, {"variant", variant}});
    return nlohmann::json{{"backend", list.backend()}, {"allow", allow}}.dump(1) + "\n";
}

}  // namespace di::runtime
