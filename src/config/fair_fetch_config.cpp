#include "config/fair_fetch_config.hpp"

#include "config/yaml_helpers.hpp"

namespace kiqd::config_detail {
namespace {

constexpr int kMaxWeight = 1000;
constexpr int kMaxTenants = 1000000;

std::map<std::string, int> parse_weights(const std::string& key, const YAML::Node& n) {
    if (!n.IsMap()) type_error(key, n, "a map of tenant: weight");
    std::map<std::string, int> out;
    for (const auto& kv : n) {
        const std::string tenant = kv.first.IsScalar() ? kv.first.Scalar() : "";
        const std::string k = key + "." + tenant;
        const long long w = as_int(k, kv.second);
        if (w < 1 || w > kMaxWeight)
            throw ConfigError(k, "must be between 1 and " + std::to_string(kMaxWeight),
                              line_of(kv.second));
        out[tenant] = static_cast<int>(w);
    }
    return out;
}

int parse_max_tenants(const std::string& key, const YAML::Node& v) {
    const long long m = as_int(key, v);
    if (m < 1 || m > kMaxTenants)
        throw ConfigError(key, "must be between 1 and " + std::to_string(kMaxTenants), line_of(v));
    return static_cast<int>(m);
}

}  // namespace

void parse_fair_fetch(const YAML::Node& n, FairFetchConfig& out) {
    if (!n.IsMap()) type_error("fair_fetch", n, "a map of queue: {arg: N} or {key: NAME}");
    std::map<std::string, int> weights;
    int max_tenants = FairFetchQueue::kDefaultMaxTenants;
    std::vector<std::pair<FairFetchQueue, bool>> queues;  // bool: its own max_tenants
    read_map(
        n, "fair_fetch",
        {{"weights", [&](const auto& key, const auto& v) { weights = parse_weights(key, v); }},
         {"max_tenants",
          [&](const auto& key, const auto& v) { max_tenants = parse_max_tenants(key, v); }}},
        "unknown key",
        [&](const std::string& name, const std::string& key, const YAML::Node& key_node,
            const YAML::Node& v) {
            check_queue_name(key, name, line_of(key_node));
            if (!v.IsMap()) type_error(key, v, "a map: {arg: N} or {key: NAME}");
            FairFetchQueue q;
            q.queue = name;
            q.line = line_of(key_node);
            bool own_max = false;
            read_map(
                v, key,
                {{"arg",
                  [&](const auto& k, const auto& a) {
                      const long long i = as_int(k, a);
                      if (i < 0 || i > 1000)
                          throw ConfigError(k, "must be between 0 and 1000", line_of(a));
                      q.arg = static_cast<int>(i);
                  }},
                 {"key", [&](const auto& k, const auto& a) { q.key = non_empty_string(k, a); }},
                 {"weights",
                  [&](const auto& k, const auto& a) { q.weights = parse_weights(k, a); }},
                 {"max_tenants", [&](const auto& k, const auto& a) {
                      q.max_tenants = parse_max_tenants(k, a);
                      own_max = true;
                  }}});
            if (q.arg && !q.key.empty())
                throw ConfigError(key, "takes arg or key, not both", q.line);
            if (!q.arg && q.key.empty())
                throw ConfigError(key, "needs arg: N (the tenant is args[N]) or key: NAME", q.line);
            queues.emplace_back(std::move(q), own_max);
            return true;
        });
    out.queues.clear();
    for (auto& [q, own_max] : queues) {
        // The section's weights are defaults; a queue's own weights win tenant by tenant.
        for (const auto& [tenant, w] : weights) q.weights.emplace(tenant, w);
        if (!own_max) q.max_tenants = max_tenants;
        out.queues.push_back(std::move(q));
    }
}

void check_fair_fetch(const Config& c) {
    for (const auto& f : c.fair_fetch.queues) {
        bool listed = false;
        for (const auto& q : c.queues) listed = listed || q.name == f.queue;
        if (!listed)
            throw ConfigError("fair_fetch." + f.queue,
                              "queue '" + f.queue +
                                  "' is not one of the queues: this process "
                                  "would never fetch it",
                              f.line);
    }
}

}  // namespace kiqd::config_detail
