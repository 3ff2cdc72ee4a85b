#include "kiqd/config.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "config/enqueues_key.hpp"
#include "config/yaml_helpers.hpp"
#include "kiqd/redis/endpoint.hpp"

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

// redis.password / password_file / password_env: exactly one may be given (the URL's password
// is checked in validate_config, because the URL may come from REDIS_URL). Messages name the
// key, the file or the variable, never the password.
void set_password_source(RedisConfig& r, const std::string& key, const YAML::Node& n) {
    const std::string value = non_empty_string(key, n);
    if (!r.password_key.empty())
        throw ConfigError(key,
                          "conflicts with " + r.password_key + " (line " +
                              std::to_string(r.password_line) +
                              "): give the Redis password in exactly one place",
                          line_of(n));
    std::string password;
    if (key == "redis.password") {
        password = value;
    } else if (key == "redis.password_file") {
        std::ifstream in(value);
        if (!in) throw ConfigError(key, "cannot read '" + value + "'", line_of(n));
        std::getline(in, password);
        if (!password.empty() && password.back() == '\r') password.pop_back();
        if (password.empty())
            throw ConfigError(key, "the first line of '" + value + "' is empty", line_of(n));
    } else {
        const char* env = std::getenv(value.c_str());
        if (!env || !*env)
            throw ConfigError(key, "environment variable " + value + " is not set or empty",
                              line_of(n));
        password = env;
    }
    r.password = std::move(password);
    r.password_key = key;
    r.password_line = line_of(n);
}

// redis.sentinels: ["host:port", ...] or [{host: h, port: p}, ...] (redis-rb's shape).
void parse_sentinels(RedisConfig& r, const std::string& key, const YAML::Node& n) {
    if (!n.IsSequence() || n.size() == 0)
        type_error(key, n, "a non-empty list of host:port addresses");
    r.sentinel.sentinels.clear();
    r.sentinel_line = line_of(n);
    for (size_t i = 0; i < n.size(); ++i) {
        const auto& item = n[i];
        const std::string ikey = key + "[" + std::to_string(i) + "]";
        try {
            if (item.IsScalar()) {
                r.sentinel.sentinels.push_back(redis::parse_sentinel_address(item.Scalar()));
            } else if (item.IsMap() && item["host"]) {
                const auto host = as_string(ikey + ".host", item["host"]);
                const auto port = item["port"] ? as_int(ikey + ".port", item["port"]) : 26379;
                if (port < 1 || port > 65535)
                    throw ConfigError(ikey + ".port", "must be between 1 and 65535",
                                      line_of(item["port"]));
                r.sentinel.sentinels.push_back(
                    redis::parse_sentinel_address(host + ":" + std::to_string(port)));
            } else {
                type_error(ikey, item, "host:port or {host: h, port: p}");
            }
        } catch (const std::invalid_argument& e) {
            throw ConfigError(ikey, e.what(), line_of(item));
        }
    }
}

void parse_redis(const YAML::Node& n, RedisConfig& r) {
    if (n.IsScalar()) {  // redis: redis://host:6379/0
        r.url = n.Scalar();
        return;
    }
    if (!n.IsMap()) type_error("redis", n, "a URL or a map");
    // An environment's redis: (production: {redis: ...}) replaces the top level's password.
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        if (k == "password" || k == "password_file" || k == "password_env") {
            r.password.clear();
            r.password_key.clear();
        }
    }
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        const std::string key = "redis." + k;
        if (k == "url")
            r.url = as_string(key, kv.second);
        else if (k == "key_prefix" || k == "namespace")
            r.key_prefix = as_string(key, kv.second);
        else if (k == "connect_timeout")
            r.connect_timeout = std::chrono::milliseconds(seconds_to_ms(key, kv.second));
        else if (k == "username") {
            r.username = non_empty_string(key, kv.second);
            r.username_line = line_of(kv.second);
        } else if (k == "password" || k == "password_file" || k == "password_env")
            set_password_source(r, key, kv.second);
        else if (k == "sentinels")
            parse_sentinels(r, key, kv.second);
        else if (k == "master_name")
            r.sentinel.master_name = non_empty_string(key, kv.second);
        else if (k == "sentinel_username")
            r.sentinel.username = non_empty_string(key, kv.second);
        else if (k == "sentinel_password")
            r.sentinel.password = non_empty_string(key, kv.second);
        else
            throw ConfigError(key, "unknown key", line_of(kv.first));
    }
    if (r.sentinel.sentinels.empty()) {
        for (const char* k : {"master_name", "sentinel_username", "sentinel_password"})
            if (n[k])
                throw ConfigError(std::string("redis.") + k, "is only used with redis.sentinels",
                                  line_of(n[k]));
    } else if (r.sentinel.master_name.empty()) {
        throw ConfigError("redis.master_name",
                          "is required with redis.sentinels (the name the sentinels monitor)",
                          r.sentinel_line);
    }
}

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

void parse_lock_option(const std::string& k, const std::string& key, const YAML::Node& v,
                       LockDefaults& lock) {
    if (k == "lock") {
        lock.lock = canonical_lock_type(as_string(key, v));
        if (lock.lock.empty())
            throw ConfigError(key,
                              "must be until_and_while_executing, while_executing, "
                              "until_executing, until_executed or until_expired",
                              line_of(v));
    } else if (k == "lock_args") {
        if (!v.IsSequence()) type_error(key, v, "a list of argument indexes, e.g. [0, 2]");
        std::vector<int> indexes;
        for (const auto& i : v) {
            const long long index = as_int(key, i);
            if (index < 0) throw ConfigError(key, "indexes must not be negative", line_of(i));
            indexes.push_back(static_cast<int>(index));
        }
        lock.lock_args = std::move(indexes);
    } else if (k == "lock_ttl") {
        lock.lock_ttl = std::chrono::milliseconds(seconds_to_ms(key, v));
        if (lock.lock_ttl->count() < 1000)
            throw ConfigError(key, "must be at least 1 second", line_of(v));
    } else if (k == "lock_timeout") {
        lock.lock_timeout = std::chrono::milliseconds(seconds_to_ms(key, v));
        if (lock.lock_timeout->count() < 0)
            throw ConfigError(key, "must not be negative", line_of(v));
    } else {  // on_conflict
        lock.on_conflict = as_string(key, v);
        if (lock.on_conflict != "reject" && lock.on_conflict != "reschedule" &&
            lock.on_conflict != "log")
            throw ConfigError(key, "must be reject, reschedule or log", line_of(v));
    }
}

// `pause_control: manual`, `pause_control: none` or `{strategy: NAME, ...}`. Whether NAME
// exists is checked once plugins are loaded (PauseStrategies).
PauseControlSpec parse_pause_control(const std::string& key, const YAML::Node& v) {
    PauseControlSpec spec;
    spec.line = line_of(v);
    if (v.IsScalar()) {
        spec.strategy = v.Scalar();
    } else if (v.IsMap()) {
        if (!v["strategy"]) throw ConfigError(key + ".strategy", "is required", spec.line);
        spec.strategy = as_string(key + ".strategy", v["strategy"]);
        spec.options = v;
    } else {
        type_error(key, v, "a strategy name or {strategy: NAME, ...}");
    }
    if (spec.strategy.empty()) throw ConfigError(key, "the strategy name is empty", spec.line);
    return spec;
}

// `by:` of a throttle or concurrency limit: class, tenant, or (throttle only) "arg:N".
void parse_limit_scope(const std::string& key, const YAML::Node& v, bool allow_arg, LimitScope& by,
                       int& arg) {
    const std::string s = as_string(key, v);
    if (s == "class") {
        by = LimitScope::job_class;
    } else if (s == "tenant") {
        by = LimitScope::tenant;
    } else if (allow_arg && s.rfind("arg:", 0) == 0) {
        const std::string digits = s.substr(4);
        if (digits.empty() || digits.size() > 6 ||
            digits.find_first_not_of("0123456789") != std::string::npos)
            throw ConfigError(key, "arg:N needs an argument index N (0, 1, ...), not '" + s + "'",
                              line_of(v));
        by = LimitScope::arg;
        arg = std::stoi(digits);
    } else {
        throw ConfigError(key,
                          allow_arg ? "must be class, tenant or arg:N, not '" + s + "'"
                                    : "must be class or tenant, not '" + s + "'",
                          line_of(v));
    }
}

ThrottleSpec parse_throttle(const std::string& base, const YAML::Node& n) {
    if (!n.IsMap()) type_error(base, n, "a map {limit: L, period: SECONDS, by: ...}");
    ThrottleSpec t;
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        const std::string key = base + "." + k;
        if (k == "limit") {
            t.limit = as_int(key, kv.second);
            if (t.limit < 1) throw ConfigError(key, "must be at least 1", line_of(kv.second));
        } else if (k == "period") {
            t.period = as_int(key, kv.second);  // whole seconds: windows are epoch-aligned
            if (t.period < 1 || t.period > 366LL * 24 * 3600)
                throw ConfigError(key, "must be a whole number of seconds from 1 to 31622400",
                                  line_of(kv.second));
        } else if (k == "by") {
            parse_limit_scope(key, kv.second, true, t.by, t.arg);
        } else {
            throw ConfigError(key, "unknown key", line_of(kv.first));
        }
    }
    if (t.limit == 0) throw ConfigError(base + ".limit", "is required", line_of(n));
    if (t.period == 0) throw ConfigError(base + ".period", "is required", line_of(n));
    return t;
}

ConcurrencySpec parse_concurrency_limit(const std::string& base, const YAML::Node& n) {
    ConcurrencySpec c;
    auto limit = [&](const std::string& key, const YAML::Node& v) {
        c.limit = as_int(key, v);
        if (c.limit < 1 || c.limit > 1000000)
            throw ConfigError(key, "must be from 1 to 1000000", line_of(v));
    };
    if (n.IsScalar()) {
        limit(base, n);
        return c;
    }
    if (!n.IsMap()) type_error(base, n, "a number or a map {limit: N, by: class | tenant}");
    int unused = -1;
    for (const auto& kv : n) {
        const std::string k = normalize_key(kv.first.Scalar());
        const std::string key = base + "." + k;
        if (k == "limit")
            limit(key, kv.second);
        else if (k == "by")
            parse_limit_scope(key, kv.second, false, c.by, unused);
        else
            throw ConfigError(key, "unknown key", line_of(kv.first));
    }
    if (c.limit == 0) throw ConfigError(base + ".limit", "is required", line_of(n));
    return c;
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

// `fair_tenant_queues: [{queue: q, threshold: N, per: seconds}, ...]` of a handlers entry.
std::vector<FairTenantRule> parse_fair_tenant_queues(const std::string& key, const YAML::Node& v) {
    if (!v.IsSequence()) type_error(key, v, "a list of {queue: NAME, threshold: N, per: SECONDS}");
    std::vector<FairTenantRule> rules;
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string ikey = key + "[" + std::to_string(i) + "]";
        const YAML::Node& item = v[i];
        if (!item.IsMap())
            type_error(ikey, item, "a map {queue: NAME, threshold: N, per: SECONDS}");
        FairTenantRule rule;
        bool have_threshold = false;
        for (const auto& kv : item) {
            const std::string k = normalize_key(kv.first.Scalar());
            const std::string rkey = ikey + "." + k;
            if (k == "queue") {
                rule.queue = as_symbol(rkey, kv.second);
                if (rule.queue.empty()) throw ConfigError(rkey, "is empty", line_of(kv.second));
            } else if (k == "threshold") {
                rule.threshold = as_number(rkey, kv.second);
                if (!std::isfinite(rule.threshold) || rule.threshold < 0)
                    throw ConfigError(rkey, "must be a number, 0 or more", line_of(kv.second));
                have_threshold = true;
            } else if (k == "per") {
                const double per = as_number(rkey, kv.second);
                if (!std::isfinite(per) || per <= 0 || per > 1e10)
                    throw ConfigError(rkey, "must be a number of seconds > 0", line_of(kv.second));
                rule.per = per;
            } else {
                throw ConfigError(rkey, "unknown key (queue, threshold, per)", line_of(kv.first));
            }
        }
        if (rule.queue.empty()) throw ConfigError(ikey + ".queue", "is required", line_of(item));
        if (!have_threshold) throw ConfigError(ikey + ".threshold", "is required", line_of(item));
        rules.push_back(std::move(rule));
    }
    if (rules.empty()) throw ConfigError(key, "is empty", line_of(v));
    return rules;
}

// `fair_tenant: {arg: N}`: the tenant is args[N].
int parse_fair_tenant_source(const std::string& key, const YAML::Node& v) {
    if (!v.IsMap() || v.size() != 1 || !v["arg"])
        type_error(key, v, "{arg: N} (the tenant is the job's args[N])");
    const long long index = as_int(key + ".arg", v["arg"]);
    if (index < 0 || index > 1000000)
        throw ConfigError(key + ".arg", "must be an argument index (0 or more)", line_of(v["arg"]));
    return static_cast<int>(index);
}

std::vector<ExecHandlerSpec> parse_handlers(const YAML::Node& n,
                                            std::map<std::string, ClassSpec>& classes) {
    if (!n.IsMap()) type_error("handlers", n, "a map of job class → {exec: [...], lock: ...}");
    std::vector<ExecHandlerSpec> out;
    for (const auto& kv : n) {
        if (!kv.first.IsScalar())
            throw ConfigError("handlers", "job class names must be strings", line_of(kv.first));
        ExecHandlerSpec spec;
        spec.job_class = kv.first.Scalar();
        spec.line = line_of(kv.first);
        const std::string base = "handlers." + spec.job_class;
        if (spec.job_class.empty()) throw ConfigError(base, "empty job class name", spec.line);
        if (!kv.second.IsMap()) type_error(base, kv.second, "a map (exec:, lock:, ...)");
        ClassSpec cls;  // members set one by one: every issue adds its own per-class keys
        cls.job_class = spec.job_class;
        cls.line = spec.line;
        bool have_exec = false;
        int exec_option_line = -1;  // timeout/grace only mean something with exec
        for (const auto& e : kv.second) {
            const std::string k = normalize_key(e.first.Scalar());
            const std::string key = base + "." + k;
            const YAML::Node& v = e.second;
            if (k == "exec") {
                if (!v.IsSequence() || v.size() == 0)
                    type_error(key, v, "a non-empty list: [command, args...] (no shell)");
                for (const auto& a : v) spec.argv.push_back(as_string(key, a));
                if (spec.argv[0].empty())
                    throw ConfigError(key, "the command must not be empty", line_of(v));
                have_exec = true;
            } else if (k == "timeout") {
                spec.timeout = std::chrono::milliseconds(seconds_to_ms(key, v));
                if (spec.timeout->count() <= 0)
                    throw ConfigError(key, "must be greater than 0", line_of(v));
                exec_option_line = line_of(e.first);
            } else if (k == "grace") {
                spec.grace = std::chrono::milliseconds(seconds_to_ms(key, v));
                if (spec.grace.count() < 0)
                    throw ConfigError(key, "must not be negative", line_of(v));
                exec_option_line = line_of(e.first);
            } else if (k == "lock" || k == "lock_args" || k == "lock_ttl" || k == "lock_timeout" ||
                       k == "on_conflict") {
                parse_lock_option(k, key, v, cls.lock);
            } else if (k == "pause_control") {
                cls.pause_control = parse_pause_control(key, v);
            } else if (k == "throttle") {
                cls.throttle = parse_throttle(key, v);
            } else if (k == "concurrency_limit") {
                cls.concurrency_limit = parse_concurrency_limit(key, v);
            } else if (k == "fair_tenant_queues") {
                cls.fair_tenant_queues = parse_fair_tenant_queues(key, v);
            } else if (k == "fair_tenant") {
                cls.fair_tenant_arg = parse_fair_tenant_source(key, v);
            } else if (k == "queue") {
                cls.queue = strip_symbol(non_empty_string(key, v));
                check_queue_name(key, cls.queue, line_of(v));
            } else if (parse_metadata_option(k, key, v, cls.metadata)) {
                // urgency, resource_boundary, ... (worker_metadata.cpp)
            } else {
                throw ConfigError(key, "unknown key", line_of(e.first));
            }
        }
        if (!have_exec && exec_option_line > 0)
            throw ConfigError(base + ".exec", "is required with timeout/grace", exec_option_line);
        if (cls.lock.lock.empty() && (cls.lock.lock_args || cls.lock.lock_ttl ||
                                      cls.lock.lock_timeout || !cls.lock.on_conflict.empty()))
            throw ConfigError(base + ".lock",
                              "is required with lock_args/lock_ttl/lock_timeout/on_conflict",
                              spec.line);
        validate_metadata(base, cls.metadata, spec.line);
        if (have_exec) out.push_back(std::move(spec));
        classes[cls.job_class] = std::move(cls);
    }
    return out;
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
            // The issue's promise: a pause is seen everywhere within a second.
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

std::string expand_erb(const std::string& text) {
    // Tags are found by plain string search, not std::regex: libstdc++'s regex engine recurses
    // once per character, so a long unterminated "<%=" overflowed the stack (found by
    // fuzz_config). For the same reason a tag body is matched only when it is short; every
    // supported form fits in kMaxBody.
    constexpr size_t kMaxBody = 1024;
    static const std::regex env_index(R"(^\s*ENV\[\s*['"]([A-Za-z_0-9]+)['"]\s*\]\s*$)");
    static const std::regex env_or(
        R"(^\s*ENV\[\s*['"]([A-Za-z_0-9]+)['"]\s*\]\s*\|\|\s*(?:['"]([^'"]*)['"]|(-?[0-9.]+))\s*$)");
    static const std::regex env_fetch(
        R"(^\s*ENV\.fetch\(\s*['"]([A-Za-z_0-9]+)['"]\s*,\s*(?:['"]([^'"]*)['"]|(-?[0-9.]+))\s*\)\s*$)");
    std::string out;
    size_t pos = 0;
    for (;;) {
        const size_t open = text.find("<%", pos);
        if (open == std::string::npos) break;
        const size_t close = text.find("%>", open + 2);
        if (close == std::string::npos) break;  // unterminated: left as text
        out.append(text, pos, open - pos);
        const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + open, '\n'));
        const bool print = open + 2 < close && text[open + 2] == '=';
        const size_t body_at = open + 2 + (print ? 1 : 0);
        const std::string body = text.substr(body_at, close - body_at);
        std::smatch e;
        auto env = [](const std::string& name) -> std::optional<std::string> {
            const char* v = std::getenv(name.c_str());
            return v ? std::optional<std::string>(v) : std::nullopt;
        };
        if (!print) {
            throw ConfigError("<% %>", "only <%= ENV[...] %> forms are supported, not Ruby code",
                              line);
        } else if (body.size() > kMaxBody) {
            throw ConfigError("<%= %>", "unsupported ERB expression (too long)", line);
        } else if (std::regex_match(body, e, env_index)) {
            out += env(e[1]).value_or("");
        } else if (std::regex_match(body, e, env_or) || std::regex_match(body, e, env_fetch)) {
            auto v = env(e[1]);
            out += v && !v->empty() ? *v : (e[2].matched ? e[2].str() : e[3].str());
        } else {
            throw ConfigError("<%= %>", "unsupported ERB expression '" + body + "'", line);
        }
        pos = close + 2;
    }
    out.append(text, pos, std::string::npos);
    return out;
}

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

std::string canonical_lock_type(const std::string& name) {
    // sidekiq-unique-jobs v8's names and aliases (sidekiq-data-model §12.1).
    static const std::map<std::string, std::string> types{
        {"until_and_while_executing", "until_and_while_executing"},
        {"while_executing", "while_executing"},
        {"around_perform", "while_executing"},
        {"while_busy", "while_executing"},
        {"while_working", "while_executing"},
        {"until_executing", "until_executing"},
        {"while_enqueued", "until_executing"},
        {"until_executed", "until_executed"},
        {"until_completed", "until_executed"},
        {"until_performed", "until_executed"},
        {"until_processed", "until_executed"},
        {"until_successfully_completed", "until_executed"},
        {"until_expired", "until_expired"},
    };
    auto it = types.find(strip_symbol(name));
    return it == types.end() ? "" : it->second;
}

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
    // The gem's own environment variables (anyway_config: SIDEKIQ_FAIR_TENANT_<KEY>), unless
    // the YAML says otherwise.
    if (const char* env = std::getenv("SIDEKIQ_FAIR_TENANT_ENQUEUES_KEY");
        env && *env && !c.fair_tenant.key_set) {
        if (auto problem = enqueues_key_problem(env))
            throw ConfigError("SIDEKIQ_FAIR_TENANT_ENQUEUES_KEY", *problem);
        c.fair_tenant.enqueues_key = env;
    }
    if (const char* env = std::getenv("SIDEKIQ_FAIR_TENANT_MAX_THROTTLING_WINDOW");
        env && *env && !c.fair_tenant.window_set) {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(env, &end, 10);
        if (errno || *end || v < 1 || v > 100LL * 365 * 86400)
            throw ConfigError("SIDEKIQ_FAIR_TENANT_MAX_THROTTLING_WINDOW",
                              "must be a whole number of seconds, at least 1");
        c.fair_tenant.max_throttling_window = v;
    }
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
    if (c.redis.url.empty()) {
        const char* env = std::getenv("REDIS_URL");
        c.redis.url = env && *env ? env : "redis://127.0.0.1:6379/0";
    }
    auto& r = c.redis;
    try {
        r.endpoint = redis::parse_redis_url(r.url);
    } catch (const std::invalid_argument& e) {
        throw ConfigError("redis.url", e.what());
    }
    // The URL (redis.url or REDIS_URL) is one password source among the others: never two.
    if (!r.password_key.empty()) {
        if (!r.endpoint.password.empty())
            throw ConfigError(r.password_key,
                              "conflicts with the password in the Redis URL (redis.url or "
                              "REDIS_URL): give the Redis password in exactly one place",
                              r.password_line);
        r.endpoint.password = r.password;
    }
    if (!r.username.empty()) {
        if (!r.endpoint.username.empty())
            throw ConfigError("redis.username", "conflicts with the user name in the Redis URL",
                              r.username_line);
        r.endpoint.username = r.username;
    }
    if (!r.endpoint.username.empty() && r.endpoint.password.empty())
        throw ConfigError("redis.username",
                          "needs a password (redis.password, redis.password_file, "
                          "redis.password_env or the URL)",
                          r.username_line);
    if (r.sentinel.enabled() && !r.endpoint.unix_path.empty())
        throw ConfigError("redis.sentinels", "cannot be combined with a unix:// Redis URL",
                          r.sentinel_line);
    if (c.cpu_bound_concurrency == 0)
        c.cpu_bound_concurrency =
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace kiqd
