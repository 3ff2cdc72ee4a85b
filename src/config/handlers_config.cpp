// The `handlers:` section: per job class, an exec command, lock options, pause control,
// throttle, concurrency limit, fair-tenant rules, queue and worker metadata. Config is built once
// on the main thread, then read-only.
#include "config/handlers_config.hpp"

#include <cmath>
#include <map>

#include "config/yaml_helpers.hpp"
#include "kiqd/worker_selector.hpp"

namespace kiqd {
namespace config_detail {
namespace {

// Per-class uniqueness defaults (lock:, lock_args:, lock_ttl:, lock_timeout:, on_conflict:).
void parse_lock_type(const std::string& key, const YAML::Node& v, LockDefaults& lock) {
    lock.lock = canonical_lock_type(as_string(key, v));
    if (lock.lock.empty())
        throw ConfigError(key,
                          "must be until_and_while_executing, while_executing, "
                          "until_executing, until_executed or until_expired",
                          line_of(v));
}

void parse_lock_args(const std::string& key, const YAML::Node& v, LockDefaults& lock) {
    if (!v.IsSequence()) type_error(key, v, "a list of argument indexes, e.g. [0, 2]");
    std::vector<int> indexes;
    for (const auto& i : v) {
        const long long index = as_int(key, i);
        if (index < 0) throw ConfigError(key, "indexes must not be negative", line_of(i));
        indexes.push_back(static_cast<int>(index));
    }
    lock.lock_args = std::move(indexes);
}

void parse_lock_ttl(const std::string& key, const YAML::Node& v, LockDefaults& lock) {
    lock.lock_ttl = std::chrono::milliseconds(seconds_to_ms(key, v));
    if (lock.lock_ttl->count() < 1000)
        throw ConfigError(key, "must be at least 1 second", line_of(v));
}

void parse_lock_timeout(const std::string& key, const YAML::Node& v, LockDefaults& lock) {
    lock.lock_timeout = std::chrono::milliseconds(seconds_to_ms(key, v));
    if (lock.lock_timeout->count() < 0) throw ConfigError(key, "must not be negative", line_of(v));
}

void parse_on_conflict(const std::string& key, const YAML::Node& v, LockDefaults& lock) {
    lock.on_conflict = as_string(key, v);
    if (lock.on_conflict != "reject" && lock.on_conflict != "reschedule" &&
        lock.on_conflict != "log")
        throw ConfigError(key, "must be reject, reschedule or log", line_of(v));
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
    read_map(n, base,
             {{"limit",
               [&](const auto& key, const auto& v) {
                   t.limit = as_int(key, v);
                   if (t.limit < 1) throw ConfigError(key, "must be at least 1", line_of(v));
               }},
              {"period",
               [&](const auto& key, const auto& v) {
                   t.period = whole_seconds(key, v);  // whole: windows are epoch-aligned
                   if (t.period < 1)
                       throw ConfigError(
                           key, "must be a whole number of seconds from 1 to 31622400", line_of(v));
               }},
              {"by", [&](const auto& key, const auto& v) {
                   parse_limit_scope(key, v, true, t.by, t.arg);
               }}});
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
    read_map(n, base, {{"limit", limit}, {"by", [&](const auto& key, const auto& v) {
                                              parse_limit_scope(key, v, false, c.by, unused);
                                          }}});
    if (c.limit == 0) throw ConfigError(base + ".limit", "is required", line_of(n));
    return c;
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
        read_map(item, ikey,
                 {{"queue",
                   [&](const auto& key, const auto& v) {
                       rule.queue = as_symbol(key, v);
                       if (rule.queue.empty()) throw ConfigError(key, "is empty", line_of(v));
                   }},
                  {"threshold",
                   [&](const auto& key, const auto& v) {
                       rule.threshold = as_number(key, v);
                       if (!std::isfinite(rule.threshold) || rule.threshold < 0)
                           throw ConfigError(key, "must be a number, 0 or more", line_of(v));
                       have_threshold = true;
                   }},
                  {"per",
                   [&](const auto& key, const auto& v) {
                       const double per = seconds_number(key, v);
                       if (per <= 0)
                           throw ConfigError(key, "must be a number of seconds > 0", line_of(v));
                       rule.per = per;
                   }}},
                 "unknown key (queue, threshold, per)");
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

// One `handlers:` entry: `spec` gets exec:, timeout:, grace:; `runner` gets runner: (and the
// timeout); `cls` everything else. True when the entry has exec:.
bool parse_handler(const std::string& base, const YAML::Node& entry, ExecHandlerSpec& spec,
                   RunnerHandlerSpec& runner, ClassSpec& cls) {
    bool have_exec = false;
    read_map(
        entry, base,
        {{"runner",
          [&](const auto& key, const auto& v) {
              runner.runner = non_empty_string(key, v);
              runner.line = line_of(v);
          }},
         {"exec",
          [&](const auto& key, const auto& v) {
              if (!v.IsSequence() || v.size() == 0)
                  type_error(key, v, "a non-empty list: [command, args...] (no shell)");
              for (const auto& a : v) spec.argv.push_back(as_string(key, a));
              if (spec.argv[0].empty())
                  throw ConfigError(key, "the command must not be empty", line_of(v));
              have_exec = true;
          }},
         {"timeout",
          [&](const auto& key, const auto& v) {
              spec.timeout = std::chrono::milliseconds(seconds_to_ms(key, v));
              if (spec.timeout->count() <= 0)
                  throw ConfigError(key, "must be greater than 0", line_of(v));
          }},
         {"grace",
          [&](const auto& key, const auto& v) {
              spec.grace = std::chrono::milliseconds(seconds_to_ms(key, v));
              if (spec.grace.count() < 0)
                  throw ConfigError(key, "must not be negative", line_of(v));
          }},
         {"lock", [&](const auto& key, const auto& v) { parse_lock_type(key, v, cls.lock); }},
         {"lock_args", [&](const auto& key, const auto& v) { parse_lock_args(key, v, cls.lock); }},
         {"lock_ttl", [&](const auto& key, const auto& v) { parse_lock_ttl(key, v, cls.lock); }},
         {"lock_timeout",
          [&](const auto& key, const auto& v) { parse_lock_timeout(key, v, cls.lock); }},
         {"on_conflict",
          [&](const auto& key, const auto& v) { parse_on_conflict(key, v, cls.lock); }},
         {"pause_control",
          [&](const auto& key, const auto& v) { cls.pause_control = parse_pause_control(key, v); }},
         {"throttle",
          [&](const auto& key, const auto& v) { cls.throttle = parse_throttle(key, v); }},
         {"concurrency_limit",
          [&](const auto& key, const auto& v) {
              cls.concurrency_limit = parse_concurrency_limit(key, v);
          }},
         {"fair_tenant_queues",
          [&](const auto& key, const auto& v) {
              cls.fair_tenant_queues = parse_fair_tenant_queues(key, v);
          }},
         {"fair_tenant",
          [&](const auto& key, const auto& v) {
              cls.fair_tenant_arg = parse_fair_tenant_source(key, v);
          }},
         {"queue",
          [&](const auto& key, const auto& v) {
              cls.queue = strip_symbol(non_empty_string(key, v));
              check_queue_name(key, cls.queue, line_of(v));
          }}},
        "unknown key",
        // urgency, resource_boundary, ... (worker_metadata.cpp)
        [&](const std::string& name, const std::string& key, const YAML::Node&,
            const YAML::Node& v) { return parse_metadata_option(name, key, v, cls.metadata); });
    if (have_exec && !runner.runner.empty())
        throw ConfigError(base + ".runner", "and exec: cannot both be given", runner.line);
    if (!runner.runner.empty()) {
        // A runner job's timeout kills its child (runner_handler.hpp); grace is exec's alone.
        runner.timeout = spec.timeout;
        for (const auto& e : entry)
            if (normalize_key(e.first.Scalar()) == "grace")
                throw ConfigError(base + ".grace", "applies to exec: only", line_of(e.first));
        return false;
    }
    // timeout/grace only mean something with exec: the error names the last one given.
    if (!have_exec) {
        int exec_option_line = -1;
        for (const auto& e : entry) {
            const std::string k = normalize_key(e.first.Scalar());
            if (k == "timeout" || k == "grace") exec_option_line = line_of(e.first);
        }
        if (exec_option_line > 0)
            throw ConfigError(base + ".exec", "is required with timeout/grace", exec_option_line);
    }
    if (cls.lock.lock.empty() && (cls.lock.lock_args || cls.lock.lock_ttl ||
                                  cls.lock.lock_timeout || !cls.lock.on_conflict.empty()))
        throw ConfigError(base + ".lock",
                          "is required with lock_args/lock_ttl/lock_timeout/on_conflict",
                          spec.line);
    validate_metadata(base, cls.metadata, spec.line);
    return have_exec;
}

}  // namespace

std::vector<ExecHandlerSpec> parse_handlers(const YAML::Node& n,
                                            std::map<std::string, ClassSpec>& classes,
                                            std::vector<RunnerHandlerSpec>& runner_handlers) {
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
        RunnerHandlerSpec runner;
        runner.job_class = spec.job_class;
        // A selector key ("resource_boundary=cpu"): class names have no '=', '&' or '|'.
        runner.selector = spec.job_class.find_first_of("=&|") != std::string::npos;
        if (runner.selector) {
            try {
                WorkerSelector::parse(spec.job_class);
            } catch (const std::invalid_argument& e) {
                throw ConfigError(base, std::string("is not a worker selector: ") + e.what(),
                                  spec.line);
            }
        }
        if (spec.job_class == "*" || runner.selector) {
            // "*" and selectors are fallback handlers, not classes: per-class options have no
            // class to apply to.
            for (const auto& e : kv.second) {
                const std::string k = normalize_key(e.first.Scalar());
                if (k != "runner" && k != "timeout")
                    throw ConfigError(base + "." + k,
                                      "\"" + spec.job_class +
                                          "\" takes runner: and timeout: only (per-class options "
                                          "belong under a class name)",
                                      line_of(e.first));
            }
            if (!kv.second["runner"])
                throw ConfigError(base + ".runner", "is required for \"" + spec.job_class + "\"",
                                  spec.line);
        }
        const bool has_exec = parse_handler(base, kv.second, spec, runner, cls);
        if (has_exec) out.push_back(std::move(spec));
        const bool is_class = cls.job_class != "*" && !runner.selector;
        if (!runner.runner.empty()) runner_handlers.push_back(std::move(runner));
        if (is_class) classes[cls.job_class] = std::move(cls);
    }
    return out;
}

}  // namespace config_detail

std::string canonical_lock_type(const std::string& name) {
    // sidekiq-unique-jobs v8's names and aliases (docs/data-model.md#unique-jobs-keys).
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
    auto it = types.find(config_detail::strip_symbol(name));
    return it == types.end() ? "" : it->second;
}

}  // namespace kiqd
