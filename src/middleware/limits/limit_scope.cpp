#include "middleware/limits/limit_scope.hpp"

namespace kiqd {

namespace {

std::optional<std::string> scope_tenant_text(const nlohmann::json& v) {
    if (v.is_string()) {
        const auto& s = v.get_ref<const std::string&>();
        if (s.empty()) return std::nullopt;
        return s;
    }
    if (v.is_number_integer()) return v.dump();
    return std::nullopt;
}

// args[i] parsed on its own (the other arguments are never read), or nullopt.
std::optional<nlohmann::json> arg_value(const Job& job, int i) {
    if (i < 0) return std::nullopt;
    const auto text = job.arg_json(static_cast<size_t>(i));
    if (!text) return std::nullopt;
    return nlohmann::json::parse(*text);
}

}  // namespace

std::optional<std::string> job_tenant(const Job& job, std::optional<int> tenant_arg) {
    if (auto tenant = job.member("fair_tenant")) return scope_tenant_text(*tenant);
    if (!tenant_arg) return std::nullopt;
    const auto arg = arg_value(job, *tenant_arg);
    return arg ? scope_tenant_text(*arg) : std::nullopt;
}

std::string limit_scope(const Job& job, LimitScope by, int arg, std::optional<int> tenant_arg) {
    const std::string& cls = job.handler_name();
    if (by == LimitScope::tenant) {
        if (auto tenant = job_tenant(job, tenant_arg)) return cls + ":tenant:" + *tenant;
    } else if (by == LimitScope::arg) {
        if (const auto v = arg_value(job, arg))
            return cls + ":arg:" + std::to_string(arg) + ":" +
                   (v->is_string() ? v->get<std::string>() : v->dump());
    }
    return cls;
}

}  // namespace kiqd
