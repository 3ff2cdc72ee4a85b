// The optional top-level sections: reliable_fetch, logging, server_middleware, routing_rules,
// metrics, concurrency_limits, fair_tenant, unique_jobs, pause_control and plugins. Config is
// built once on the main thread, then read-only.
#include "config/features_config.hpp"

#include <cerrno>
#include <cstdlib>

#include "config/enqueues_key.hpp"
#include "config/yaml_helpers.hpp"

namespace kiqd {
namespace config_detail {

void parse_reliable_fetch(const YAML::Node& n, ReliableFetchConfig& r) {
    if (!n.IsMap()) type_error("reliable_fetch", n, "a map");
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        const std::string key = "reliable_fetch." + k;
        if (k == "orphan_check_interval") {
            r.orphan_check_interval = positive_seconds(key, kv.second);
        } else if (k == "liveness_ttl") {
            r.liveness_ttl = positive_seconds(key, kv.second);
            if (r.liveness_ttl < std::chrono::seconds(3))
                throw ConfigError(key, "must be at least 3 seconds", line_of(kv.second));
        } else if (k == "max_interruptions") {
            r.max_interruptions = static_cast<int>(as_int(key, kv.second));
            if (r.max_interruptions < 1)
                throw ConfigError(key, "must be at least 1", line_of(kv.second));
        } else if (k == "batch_size") {
            const long long b = as_int(key, kv.second);
            if (b < 1 || b > ReliableFetchConfig::kMaxBatchSize)
                throw ConfigError(
                    key,
                    "must be between 1 and " + std::to_string(ReliableFetchConfig::kMaxBatchSize),
                    line_of(kv.second));
            r.batch_size = static_cast<int>(b);
        } else {
            throw ConfigError(key, "unknown key", line_of(kv.first));
        }
    }
}

void parse_logging(const YAML::Node& n, LoggingConfig& l) {
    if (!n.IsMap()) type_error("logging", n, "a map");
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        const std::string key = "logging." + k;
        if (k == "level")
            l.level = as_string(key, kv.second);
        else if (k == "format")
            l.format = as_string(key, kv.second);
        else if (k == "file")
            l.file = as_string(key, kv.second);
        else
            throw ConfigError(key, "unknown key", line_of(kv.first));
    }
}

std::vector<MiddlewareSpec> parse_middleware(const YAML::Node& n) {
    if (!n.IsSequence()) type_error("server_middleware", n, "a list");
    std::vector<MiddlewareSpec> out;
    for (size_t i = 0; i < n.size(); ++i) {
        const auto& item = n[i];
        const std::string key = "server_middleware[" + std::to_string(i) + "]";
        if (item.IsScalar()) {
            out.push_back({item.Scalar(), YAML::Node(), line_of(item)});
        } else if (item.IsMap() && item.size() == 1) {
            auto it = item.begin();
            out.push_back({it->first.Scalar(), it->second, line_of(item)});
        } else {
            type_error(key, item, "a middleware name or {name: options}");
        }
    }
    return out;
}

// routing_rules: [["urgency=high", "urgent"], ["*", "default"]] (GitLab's shape).
std::vector<RoutingRule> parse_routing_rules(const YAML::Node& n) {
    if (!n.IsSequence()) type_error("routing_rules", n, "a list of [query, queue] pairs");
    std::vector<RoutingRule> out;
    for (size_t i = 0; i < n.size(); ++i) {
        const auto& item = n[i];
        const std::string key = "routing_rules[" + std::to_string(i) + "]";
        if (!item.IsSequence() || item.size() != 2) type_error(key, item, "a [query, queue] pair");
        RoutingRule rule;
        rule.line = line_of(item);
        try {
            rule.selector = WorkerSelector::parse(as_string(key + ".query", item[0]));
        } catch (const std::invalid_argument& e) {
            throw ConfigError(key, e.what(), line_of(item[0]));
        }
        if (!item[1].IsNull()) {
            rule.queue = as_symbol(key + ".queue", item[1]);
            if (!rule.queue.empty()) check_queue_name(key, rule.queue, line_of(item[1]));
        }
        out.push_back(std::move(rule));
    }
    return out;
}

void parse_metrics(const YAML::Node& n, MetricsConfig& m) {
    if (!n.IsMap()) type_error("metrics", n, "a map ({listen: \"127.0.0.1:9394\"})");
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        const std::string key = "metrics." + k;
        if (k == "listen") {
            m.line = line_of(kv.second);
            parse_listen_address(key, non_empty_string(key, kv.second), m, m.line);
        } else {
            throw ConfigError(key, "unknown key", line_of(kv.first));
        }
    }
}

void parse_concurrency_limits(const YAML::Node& n, ConcurrencyLimitsConfig& c) {
    if (!n.IsMap()) type_error("concurrency_limits", n, "a map");
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        const std::string key = "concurrency_limits." + k;
        if (k == "slot_ttl") {
            c.slot_ttl = positive_seconds(key, kv.second);
            // Held slots are extended every third of it: below 3 s a busy Redis could let a
            // running job's slot expire.
            if (c.slot_ttl < std::chrono::seconds(3))
                throw ConfigError(key, "must be at least 3 seconds", line_of(kv.second));
        } else if (k == "check_interval") {
            c.check_interval = positive_seconds(key, kv.second);
        } else {
            throw ConfigError(key, "unknown key", line_of(kv.first));
        }
    }
}

void parse_fair_tenant(const YAML::Node& n, FairTenantConfig& f) {
    if (!n.IsMap()) type_error("fair_tenant", n, "a map");
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        const std::string key = "fair_tenant." + k;
        if (k == "max_throttling_window") {
            f.max_throttling_window = as_int(key, kv.second);
            if (f.max_throttling_window < 1 || f.max_throttling_window > 100LL * 365 * 86400)
                throw ConfigError(key, "must be a whole number of seconds, at least 1",
                                  line_of(kv.second));
            f.window_set = true;
        } else if (k == "enqueues_key") {
            f.enqueues_key = as_string(key, kv.second);
            if (auto problem = enqueues_key_problem(f.enqueues_key))
                throw ConfigError(key, *problem, line_of(kv.second));
            f.key_set = true;
        } else {
            throw ConfigError(key, "unknown key (max_throttling_window, enqueues_key)",
                              line_of(kv.first));
        }
    }
}

void parse_unique_jobs(const YAML::Node& n, UniqueJobsConfig& u) {
    if (!n.IsMap()) type_error("unique_jobs", n, "a map");
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        const std::string key = "unique_jobs." + k;
        if (k == "default_lock_ttl") {
            u.default_lock_ttl = positive_seconds(key, kv.second);
            if (u.default_lock_ttl < std::chrono::seconds(1))
                throw ConfigError(key, "must be at least 1 second", line_of(kv.second));
        } else if (k == "reaper_interval") {
            u.reaper_interval = positive_seconds(key, kv.second);
        } else if (k == "wait_interval") {
            u.wait_interval = positive_seconds(key, kv.second);
        } else {
            throw ConfigError(key, "unknown key", line_of(kv.first));
        }
    }
}

void parse_pause_control_config(const YAML::Node& n, PauseControlConfig& p) {
    if (!n.IsMap()) type_error("pause_control", n, "a map");
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        const std::string key = "pause_control." + k;
        if (k == "refresh_interval") {
            p.refresh_interval = positive_seconds(key, kv.second);
            // The promise: a pause is seen everywhere within a second.
            if (p.refresh_interval > std::chrono::seconds(1))
                throw ConfigError(key, "must be at most 1 second", line_of(kv.second));
        } else if (k == "resume_interval") {
            p.resume_interval = positive_seconds(key, kv.second);
        } else if (k == "batch_size") {
            const long long b = as_int(key, kv.second);
            if (b < 1 || b > 100000)
                throw ConfigError(key, "must be between 1 and 100000", line_of(kv.second));
            p.batch_size = static_cast<int>(b);
        } else {
            throw ConfigError(key, "unknown key", line_of(kv.first));
        }
    }
}

std::vector<PluginSpec> parse_plugins(const YAML::Node& n) {
    if (!n.IsSequence()) type_error("plugins", n, "a list of shared-object paths");
    std::vector<PluginSpec> out;
    for (size_t i = 0; i < n.size(); ++i) {
        const std::string key = "plugins[" + std::to_string(i) + "]";
        PluginSpec p{as_string(key, n[i]), line_of(n[i])};
        if (p.path.empty()) throw ConfigError(key, "empty path", p.line);
        out.push_back(std::move(p));
    }
    return out;
}

void apply_fair_tenant_environment(FairTenantConfig& f) {
    // The gem's own environment variables (anyway_config: SIDEKIQ_FAIR_TENANT_<KEY>), unless
    // the YAML says otherwise.
    if (const char* env = std::getenv("SIDEKIQ_FAIR_TENANT_ENQUEUES_KEY");
        env && *env && !f.key_set) {
        if (auto problem = enqueues_key_problem(env))
            throw ConfigError("SIDEKIQ_FAIR_TENANT_ENQUEUES_KEY", *problem);
        f.enqueues_key = env;
    }
    if (const char* env = std::getenv("SIDEKIQ_FAIR_TENANT_MAX_THROTTLING_WINDOW");
        env && *env && !f.window_set) {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(env, &end, 10);
        if (errno || *end || v < 1 || v > 100LL * 365 * 86400)
            throw ConfigError("SIDEKIQ_FAIR_TENANT_MAX_THROTTLING_WINDOW",
                              "must be a whole number of seconds, at least 1");
        f.max_throttling_window = v;
    }
}

}  // namespace config_detail

void parse_listen_address(const std::string& key, const std::string& text, MetricsConfig& out,
                          int line) {
    // host:port; [v6]:port. Loopback is the safe default operators are expected to choose, but
    // any address is accepted (a Prometheus server elsewhere must reach it).
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
        throw ConfigError(key, "must be host:port, e.g. 127.0.0.1:9394, not '" + text + "'", line);
    std::string host = text.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    const std::string port = text.substr(colon + 1);
    if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5)
        throw ConfigError(key, "port '" + port + "' is not a number", line);
    const int p = std::stoi(port);
    if (p > 65535) throw ConfigError(key, "port must be at most 65535", line);
    out.listen = text;
    out.host = host;
    out.port = p;
}

}  // namespace kiqd
