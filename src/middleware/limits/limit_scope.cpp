#include "middleware/limits/limit_scope.hpp"

namespace kiqd {

namespace {

std::optional<std::string> tenant_text(const nlohmann::json& v) {
    if (v.is_string()) {
        const auto& s = v.get_ref<const std::string&>();
        if (s.empty()) return std::nullopt;
        return s;
    }
    if (v.is_number_integer()) return v.dump();
    return std::nullopt;
}

}  // namespace

std::optional<std::string> job_tenant(const Job& job, std::optional<int> tenant_arg) {
    auto it = job.payload().find("fair_tenant");
    if (it != job.payload().end()) return tenant_text(*it);
    const auto& args = job.args();
    if (tenant_arg && *tenant_arg >= 0 && args.is_array() &&
        static_cast<size_t>(*tenant_arg) < args.size())
        return tenant_text(args[static_cast<size_t>(*tenant_arg)]);
    return std::nullopt;
}

std::string limit_scope(const Job& job, LimitScope by, int arg, std::optional<int> tenant_arg) {
    const std::string& cls = job.handler_name();
    if (by == LimitScope::tenant) {
        if (auto tenant = job_tenant(job, tenant_arg)) return cls + ":tenant:" + *tenant;
    } else if (by == LimitScope::arg) {
        const auto& args = job.args();
        if (arg >= 0 && args.is_array() && static_cast<size_t>(arg) < args.size()) {
            const auto& v = args[static_cast<size_t>(arg)];
            return cls + ":arg:" + std::to_string(arg) + ":" +
                   (v.is_string() ? v.get<std::string>() : v.dump());
        }
    }
    return cls;
}

}  // namespace kiqd
