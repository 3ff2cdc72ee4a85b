#include "config/limit_fetch_config.hpp"

#include "config/yaml_helpers.hpp"

namespace kiqd::config_detail {

void parse_queue_limits(const std::string& key, const YAML::Node& n,
                        std::map<std::string, long long>& out) {
    if (!n.IsMap()) type_error(key, n, "a map of queue names to limits");
    for (const auto& kv : n) {
        const std::string queue = as_symbol(key, kv.first);
        const std::string item = key + "." + queue;
        check_queue_name(item, queue, line_of(kv.first));
        const long long limit = as_int(item, kv.second);
        if (limit < 0 || limit > 1000000)
            throw ConfigError(item, "must be between 0 and 1000000", line_of(kv.second));
        out[queue] = limit;
    }
}

void parse_blocking(const std::string& key, const YAML::Node& n,
                    std::vector<std::vector<std::string>>& out) {
    if (!n.IsSequence()) type_error(key, n, "a list of queues and lists of queues");
    for (size_t i = 0; i < n.size(); ++i) {
        const std::string item = key + "[" + std::to_string(i) + "]";
        std::vector<std::string> group;
        if (n[i].IsSequence()) {
            for (const auto& q : n[i]) group.push_back(as_symbol(item, q));
            if (group.empty()) throw ConfigError(item, "is an empty group", line_of(n[i]));
        } else {
            group.push_back(as_symbol(item, n[i]));
        }
        for (const auto& q : group) check_queue_name(item, q, line_of(n[i]));
        out.push_back(std::move(group));
    }
}

void check_limit_fetch(const Config& c, const std::string& key) {
    const int line = c.limit_fetch.line;
    if (c.fetch == FetchMode::reliable)
        throw ConfigError(key,
                          "sidekiq-limit_fetch's limits need fetch: basic (the gem's fetch is "
                          "Sidekiq's basic fetch with limits)",
                          line);
    if (c.prefetch > 1)
        throw ConfigError(key, "cannot be combined with prefetch: a limit counts jobs one by one",
                          line);
    if (!c.capsules.empty()) throw ConfigError(key, "cannot be combined with capsules", line);
    if (!c.fair_fetch.queues.empty())
        throw ConfigError(key, "cannot be combined with fair_fetch queues", line);
}

}  // namespace kiqd::config_detail
