// The top level of the config: sidekiq.yml's own keys, queues and environment sub-hashes, each
// section handed to its reader (redis_config, handlers_config, features_config); loading and the
// checks after command-line overrides. Config is built once on the main thread, then read-only.
#include "kiqd/config.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "config/features_config.hpp"
#include "config/handlers_config.hpp"
#include "config/redis_config.hpp"
#include "config/yaml_helpers.hpp"

namespace kiqd {

using namespace config_detail;

namespace {

std::vector<QueueWeight> parse_queues(const YAML::Node& n) {
    if (!n.IsSequence()) type_error("queues", n, "a list of names or [name, weight] pairs");
    std::vector<QueueWeight> out;
    for (size_t i = 0; i < n.size(); ++i) {
        const auto& item = n[i];
        const std::string key = "queues[" + std::to_string(i) + "]";
        QueueWeight q;
        if (item.IsScalar()) {
            q.name = strip_symbol(item.Scalar());
        } else if (item.IsSequence() && (item.size() == 1 || item.size() == 2)) {
            q.name = as_symbol(key, item[0]);
            if (item.size() == 2) {
                long long w = as_int(key + ".weight", item[1]);
                if (w < 1) throw ConfigError(key, "weight must be at least 1", line_of(item[1]));
                if (w > 1000)
                    throw ConfigError(key, "weight must be at most 1000", line_of(item[1]));
                q.weight = static_cast<int>(w);
            }
        } else {
            type_error(key, item, "a queue name or a [name, weight] pair");
        }
        out.push_back(std::move(q));
    }
    if (out.empty()) throw ConfigError("queues", "is empty: list at least one queue", line_of(n));
    return out;
}

const std::set<std::string>& environment_names() {
    static const std::set<std::string> k{"development", "test", "staging", "production"};
    return k;
}

void apply_map(const YAML::Node& root, Config& c, const std::string& environment, bool top_level) {
    for (const auto& kv : root) {
        if (!kv.first.IsScalar()) throw ConfigError("?", "keys must be strings", line_of(kv.first));
        if (kv.first.Scalar().empty())
            throw ConfigError("(empty key)", "keys must not be empty", line_of(kv.first));
        const std::string k = normalize_key(kv.first.Scalar());
        const YAML::Node& v = kv.second;
        if (k == "concurrency") {
            c.concurrency = static_cast<int>(as_int(k, v));
            if (c.concurrency < 1) throw ConfigError(k, "must be at least 1", line_of(v));
        } else if (k == "timeout") {
            c.timeout = std::chrono::milliseconds(seconds_to_ms(k, v));
            if (c.timeout.count() <= 0) throw ConfigError(k, "must be greater than 0", line_of(v));
        } else if (k == "queues") {
            c.queues = parse_queues(v);
        } else if (k == "fetch") {
            c.fetch = parse_fetch_mode(k, as_string(k, v), line_of(v));
        } else if (k == "reliable_fetch") {
            parse_reliable_fetch(v, c.reliable_fetch);
        } else if (k == "prefetch") {
            const long long b = as_int(k, v);
            if (b < 1 || b > ReliableFetchConfig::kMaxBatchSize)
                throw ConfigError(
                    k,
                    "must be between 1 and " + std::to_string(ReliableFetchConfig::kMaxBatchSize),
                    line_of(v));
            c.prefetch = static_cast<int>(b);
        } else if (k == "tag") {
            c.tag = as_string(k, v);
        } else if (k == "labels") {
            if (!v.IsSequence()) type_error(k, v, "a list of strings");
            c.labels.clear();
            for (const auto& l : v) c.labels.push_back(as_string(k, l));
        } else if (k == "verbose") {
            c.verbose = as_bool(k, v);
        } else if (k == "strict" || k == "require" || k == "pidfile" || k == "logfile" ||
                   k == "environment") {
            // Ruby-only or legacy Sidekiq keys: accepted so an existing sidekiq.yml loads
            // unchanged; kiqd has nothing to do with them (strict/weighted follows the weights,
            // as in Sidekiq 6.4.1).
        } else if (k == "compat") {
            long long v6 = as_int(k, v);
            if (v6 != 6 && v6 != 7 && v6 != 8)
                throw ConfigError(k, "must be 6, 7 or 8", line_of(v));
            c.compat = static_cast<Compat>(v6);
        } else if (k == "redis") {
            parse_redis(v, c.redis);
        } else if (k == "logging") {
            parse_logging(v, c.logging);
        } else if (k == "max_retries") {
            c.max_retries = static_cast<int>(as_int(k, v));
            if (c.max_retries < 0) throw ConfigError(k, "must not be negative", line_of(v));
        } else if (k == "dead_max_jobs") {
            c.dead_max_jobs = as_int(k, v);
            if (c.dead_max_jobs < 1) throw ConfigError(k, "must be at least 1", line_of(v));
        } else if (k == "dead_timeout_in_seconds") {
            c.dead_timeout_seconds = as_int(k, v);
            if (c.dead_timeout_seconds < 1) throw ConfigError(k, "must be at least 1", line_of(v));
        } else if (k == "average_scheduled_poll_interval") {
            c.average_scheduled_poll_interval = as_number(k, v);
            if (c.average_scheduled_poll_interval <= 0)
                throw ConfigError(k, "must be greater than 0", line_of(v));
        } else if (k == "poll_interval_average") {
            c.poll_interval_average = as_number(k, v);
            if (*c.poll_interval_average <= 0)
                throw ConfigError(k, "must be greater than 0", line_of(v));
        } else if (k == "max_payload_bytes") {
            long long b = as_int(k, v);
            if (b < 1024) throw ConfigError(k, "must be at least 1024", line_of(v));
            c.max_payload_bytes = static_cast<size_t>(b);
        } else if (k == "server_middleware") {
            c.server_middleware = parse_middleware(v);
        } else if (k == "handlers") {
            c.exec_handlers = parse_handlers(v, c.classes);
        } else if (k == "unique_jobs") {
            parse_unique_jobs(v, c.unique_jobs);
        } else if (k == "pause_control") {
            parse_pause_control_config(v, c.pause_control);
        } else if (k == "concurrency_limits") {
            parse_concurrency_limits(v, c.concurrency_limits);
        } else if (k == "fair_tenant") {
            parse_fair_tenant(v, c.fair_tenant);
        } else if (k == "plugins") {
            c.plugins = parse_plugins(v);
        } else if (k == "routing_rules") {
            c.routing_rules = parse_routing_rules(v);
        } else if (k == "selector") {
            c.selector = non_empty_string(k, v);
            c.selector_line = line_of(v);
            try {
                WorkerSelector::parse(c.selector);
            } catch (const std::invalid_argument& e) {
                throw ConfigError(k, e.what(), line_of(v));
            }
        } else if (k == "metrics") {
            parse_metrics(v, c.metrics);
        } else if (k == "cpu_bound_concurrency") {
            c.cpu_bound_concurrency = static_cast<int>(as_int(k, v));
            if (c.cpu_bound_concurrency < 1 || c.cpu_bound_concurrency > 1000)
                throw ConfigError(k, "must be between 1 and 1000", line_of(v));
        } else if (k == "job_metadata") {
            c.job_metadata = as_bool(k, v);
        } else if (top_level && (environment_names().count(k) || k == environment) && v.IsMap()) {
            if (k == environment) apply_map(v, c, environment, false);
        } else {
            throw ConfigError(k, "unknown key", line_of(kv.first));
        }
    }
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::string& environment) {
    Config c;
    c.source = source;
    c.environment = environment;
    YAML::Node root;
    try {
        root = YAML::Load(expand_erb(yaml_text));
    } catch (const YAML::Exception& e) {
        throw ConfigError("(yaml)", e.msg, e.mark.line >= 0 ? e.mark.line + 1 : -1);
    }
    if (root.IsNull()) return c;  // an empty file is all defaults
    if (!root.IsMap()) throw ConfigError("(top level)", "must be a map of settings", line_of(root));
    apply_map(root, c, environment, true);
    return c;
}

Config load_config_file(const std::string& path, const std::string& environment) {
    std::ifstream in(path);
    if (!in) throw ConfigError("--config", "cannot read '" + path + "'");
    std::stringstream buf;
    buf << in.rdbuf();
    return parse_config(buf.str(), path, environment);
}

FetchMode parse_fetch_mode(const std::string& key, const std::string& value, int line) {
    if (value == "basic") return FetchMode::basic;
    if (value == "reliable") return FetchMode::reliable;
    throw ConfigError(key, "must be basic or reliable, not '" + value + "'", line);
}

QueueWeight parse_queue_arg(const std::string& arg) {
    QueueWeight q;
    auto comma = arg.find(',');
    q.name = arg.substr(0, comma);
    if (comma != std::string::npos) {
        try {
            size_t used = 0;
            q.weight = std::stoi(arg.substr(comma + 1), &used);
            if (used != arg.size() - comma - 1) throw std::invalid_argument("x");
        } catch (const std::exception&) {
            throw ConfigError("-q", "weight in '" + arg + "' is not an integer");
        }
        if (q.weight < 1) throw ConfigError("-q", "weight in '" + arg + "' must be at least 1");
    }
    return q;
}

void validate_config(Config& c) {
    apply_fair_tenant_environment(c.fair_tenant);
    std::set<std::string> seen;
    for (const auto& q : c.queues) {
        check_queue_name("queues", q.name);
        if (!seen.insert(q.name).second)
            throw ConfigError("queues", "queue '" + q.name + "' is listed twice");
    }
    if (c.queues.empty()) throw ConfigError("queues", "no queues configured");
    if (c.concurrency < 1 || c.concurrency > 1000)
        throw ConfigError("concurrency", "must be between 1 and 1000");
    if (c.prefetch > 1 && c.fetch == FetchMode::reliable)
        throw ConfigError("prefetch",
                          "applies to fetch: basic only; reliable fetch batches with "
                          "reliable_fetch.batch_size");
    static const std::set<std::string> levels{"trace", "debug", "info", "warn", "error", "off"};
    if (!levels.count(c.logging.level))
        throw ConfigError("logging.level", "must be one of trace, debug, info, warn, error, off");
    if (c.logging.format != "text" && c.logging.format != "json")
        throw ConfigError("logging.format", "must be text or json");
    resolve_redis_endpoint(c.redis);
    if (c.cpu_bound_concurrency == 0)
        c.cpu_bound_concurrency =
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace kiqd