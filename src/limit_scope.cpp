#include "kiqd/limit_scope.hpp"

namespace kiqd {

std::optional<std::string> job_tenant(const Job& job) {
    auto it = job.payload.find("fair_tenant");
    if (it == job.payload.end()) return std::nullopt;
    if (it->is_string()) {
        const auto& s = it->get_ref<const std::string&>();
        if (s.empty()) return std::nullopt;
        return s;
    }
    if (it->is_number_integer()) return it->dump();
    return std::nullopt;
}

std::string limit_scope(const Job& job, LimitScope by, int arg) {
    const std::string& cls = job.handler_name();
    if (by == LimitScope::tenant) {
        if (auto tenant = job_tenant(job)) return cls + ":tenant:" + *tenant;
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
