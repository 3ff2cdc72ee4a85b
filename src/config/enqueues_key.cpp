#include "config/enqueues_key.hpp"

namespace kiqd {

std::optional<std::string> enqueues_key_problem(const std::string& format) {
    for (size_t i = 0; i < format.size(); ++i) {
        if (format[i] != '%') continue;
        if (i + 1 < format.size() && format[i + 1] == '%') {
            ++i;
            continue;
        }
        bool known = false;
        for (const char* name : {"%<queue>s", "%<job_class>s", "%<fair_tenant>s"})
            if (format.compare(i, std::char_traits<char>::length(name), name) == 0) known = true;
        if (!known)
            return "only the placeholders %<queue>s, %<job_class>s and %<fair_tenant>s (and %%) "
                   "are supported";
    }
    if (format.empty()) return std::string("is empty");
    return std::nullopt;
}

std::string format_enqueues_key(const std::string& format, const std::string& queue,
                                const std::string& job_class, const std::string& tenant) {
    std::string out;
    for (size_t i = 0; i < format.size(); ++i) {
        if (format[i] != '%') {
            out += format[i];
            continue;
        }
        auto take = [&](const char* name, const std::string& value) {
            const size_t n = std::char_traits<char>::length(name);
            if (format.compare(i, n, name) != 0) return false;
            out += value;
            i += n - 1;
            return true;
        };
        if (i + 1 < format.size() && format[i + 1] == '%') {
            out += '%';
            ++i;
        } else if (!take("%<queue>s", queue) && !take("%<job_class>s", job_class) &&
                   !take("%<fair_tenant>s", tenant)) {
            out += '%';  // validated at config load; keep it literal if it ever gets here
        }
    }
    return out;
}

}  // namespace kiqd
