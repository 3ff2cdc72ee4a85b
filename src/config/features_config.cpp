// The optional top-level sections: reliable_fetch, logging, server_middleware, routing_rules,
// metrics, concurrency_limits, fair_tenant, unique_jobs, pause_control and plugins. Config is
// built once on the main thread, then read-only.
#include "config/features_config.hpp"

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "config/enqueues_key.hpp"
#include "config/yaml_helpers.hpp"

namespace kiqd {
namespace config_detail {
namespace {

// fair_tenant.max_throttling_window, from the YAML or the gem's environment variable.
constexpr const char* kThrottlingWindowRange =
    "must be a whole number of seconds from 1 to 31622400 (366 days)";
bool valid_throttling_window(long long seconds) {
    return seconds >= 1 && seconds <= kMaxDurationSeconds;
}

}  // namespace

int fetch_batch_size(const std::string& key, const YAML::Node& v) {
    const long long b = as_int(key, v);
    if (b < 1 || b > ReliableFetchConfig::kMaxBatchSize)
        throw ConfigError(
            key, "must be between 1 and " + std::to_string(ReliableFetchConfig::kMaxBatchSize),
            line_of(v));
    return static_cast<int>(b);
}

void parse_reliable_fetch(const YAML::Node& n, ReliableFetchConfig& r) {
    if (!n.IsMap()) type_error("reliable_fetch", n, "a map");
    read_map(n, "reliable_fetch",
             {{"orphan_check_interval",
               [&](const auto& key, const auto& v) {
                   r.orphan_check_interval = positive_seconds(key, v);
               }},
              {"liveness_ttl",
               [&](const auto& key, const auto& v) {
                   r.liveness_ttl = positive_seconds(key, v);
                   if (r.liveness_ttl < std::chrono::seconds(3))
                       throw ConfigError(key, "must be at least 3 seconds", line_of(v));
               }},
              {"max_interruptions",
               [&](const auto& key, const auto& v) {
                   r.max_interruptions = static_cast<int>(as_int(key, v));
                   if (r.max_interruptions < 1)
                       throw ConfigError(key, "must be at least 1", line_of(v));
               }},
              {"batch_size",
               [&](const auto& key, const auto& v) { r.batch_size = fetch_batch_size(key, v); }}});
}

void parse_logging(const YAML::Node& n, LoggingConfig& l) {
    if (!n.IsMap()) type_error("logging", n, "a map");
    read_map(n, "logging",
             {{"level", [&](const auto& key, const auto& v) { l.level = as_string(key, v); }},
              {"format", [&](const auto& key, const auto& v) { l.format = as_string(key, v); }},
              {"file", [&](const auto& key, const auto& v) { l.file = as_string(key, v); }}});
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
    read_map(n, "metrics", {{"listen", [&](const auto& key, const auto& v) {
                                 m.line = line_of(v);
                                 parse_listen_address(key, non_empty_string(key, v), m, m.line);
                             }}});
}

void parse_concurrency_limits(const YAML::Node& n, ConcurrencyLimitsConfig& c) {
    if (!n.IsMap()) type_error("concurrency_limits", n, "a map");
    read_map(n, "concurrency_limits",
             {{"slot_ttl",
               [&](const auto& key, const auto& v) {
                   c.slot_ttl = positive_seconds(key, v);
                   // Held slots are extended every third of it: below 3 s a busy Redis could
                   // let a running job's slot expire.
                   if (c.slot_ttl < std::chrono::seconds(3))
                       throw ConfigError(key, "must be at least 3 seconds", line_of(v));
               }},
              {"check_interval", [&](const auto& key, const auto& v) {
                   c.check_interval = positive_seconds(key, v);
               }}});
}

void parse_fair_tenant(const YAML::Node& n, FairTenantConfig& f) {
    if (!n.IsMap()) type_error("fair_tenant", n, "a map");
    read_map(n, "fair_tenant",
             {{"max_throttling_window",
               [&](const auto& key, const auto& v) {
                   f.max_throttling_window = as_int(key, v);
                   if (!valid_throttling_window(f.max_throttling_window))
                       throw ConfigError(key, kThrottlingWindowRange, line_of(v));
                   f.window_set = true;
               }},
              {"enqueues_key",
               [&](const auto& key, const auto& v) {
                   f.enqueues_key = as_string(key, v);
                   if (auto problem = enqueues_key_problem(f.enqueues_key))
                       throw ConfigError(key, *problem, line_of(v));
                   f.key_set = true;
               }}},
             "unknown key (max_throttling_window, enqueues_key)");
}

void parse_unique_jobs(const YAML::Node& n, UniqueJobsConfig& u) {
    if (!n.IsMap()) type_error("unique_jobs", n, "a map");
    read_map(
        n, "unique_jobs",
        {{"default_lock_ttl",
          [&](const auto& key, const auto& v) {
              u.default_lock_ttl = positive_seconds(key, v);
              if (u.default_lock_ttl < std::chrono::seconds(1))
                  throw ConfigError(key, "must be at least 1 second", line_of(v));
          }},
         {"reaper_interval",
          [&](const auto& key, const auto& v) { u.reaper_interval = positive_seconds(key, v); }},
         {"wait_interval",
          [&](const auto& key, const auto& v) { u.wait_interval = positive_seconds(key, v); }},
         {"digest_algorithm",
          [&](const auto& key, const auto& v) {
              const std::string a = as_string(key, v);
              if (a != "legacy" && a != "modern")
                  throw ConfigError(key, "must be legacy or modern", line_of(v));
              u.modern_digest = a == "modern";
          }},
         {"digest_json", [&](const auto& key, const auto& v) {
              const std::string a = as_string(key, v);
              if (a != "float_to_s" && a != "json_2_15")
                  throw ConfigError(key, "must be float_to_s or json_2_15", line_of(v));
              u.json_2_15_floats = a == "json_2_15";
          }}});
}

void parse_pause_control_config(const YAML::Node& n, PauseControlConfig& p) {
    if (!n.IsMap()) type_error("pause_control", n, "a map");
    read_map(
        n, "pause_control",
        {{"refresh_interval",
          [&](const auto& key, const auto& v) {
              p.refresh_interval = positive_seconds(key, v);
              // The promise: a pause is seen everywhere within a second.
              if (p.refresh_interval > std::chrono::seconds(1))
                  throw ConfigError(key, "must be at most 1 second", line_of(v));
          }},
         {"resume_interval",
          [&](const auto& key, const auto& v) { p.resume_interval = positive_seconds(key, v); }},
         {"batch_size", [&](const auto& key, const auto& v) {
              const long long b = as_int(key, v);
              if (b < 1 || b > 100000)
                  throw ConfigError(key, "must be between 1 and 100000", line_of(v));
              p.batch_size = static_cast<int>(b);
          }}});
}

std::vector<PluginSpec> parse_plugins(const YAML::Node& n, const std::string& config_dir) {
    if (!n.IsSequence()) type_error("plugins", n, "a list of shared-object paths");
    std::vector<PluginSpec> out;
    for (size_t i = 0; i < n.size(); ++i) {
        const std::string key = "plugins[" + std::to_string(i) + "]";
        PluginSpec p{as_string(key, n[i]), line_of(n[i])};
        if (p.path.empty()) throw ConfigError(key, "empty path", p.line);
        // Beside the config, as `require` paths are beside the code: a plugin found in the
        // service's writable working directory could be planted there.
        if (p.path.front() != '/')
            p.path = (std::filesystem::path(config_dir + "/") / p.path).lexically_normal().string();
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
        if (errno || *end || !valid_throttling_window(v))
            throw ConfigError("SIDEKIQ_FAIR_TENANT_MAX_THROTTLING_WINDOW", kThrottlingWindowRange);
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
