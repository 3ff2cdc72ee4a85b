// The top level of the config: sidekiq.yml's own keys, queues and environment sub-hashes, each
// section handed to its reader (redis_config, handlers_config, features_config); loading and the
// checks after command-line overrides. Config is built once on the main thread, then read-only.
#include "kiqd/config.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "config/capsules_config.hpp"
#include "config/cron_config.hpp"
#include "config/fair_fetch_config.hpp"
#include "config/features_config.hpp"
#include "config/handlers_config.hpp"
#include "config/limit_fetch_config.hpp"
#include "config/redis_config.hpp"
#include "config/runners_config.hpp"
#include "config/yaml_helpers.hpp"

namespace kiqd {

using namespace config_detail;

namespace {

// The absolute directory of the config file (the working directory for a config given as
// text, as tests do), against which relative plugin paths are resolved.
std::string config_directory(const Config& c) {
    std::error_code ec;
    const auto parent = std::filesystem::path(c.source).parent_path();
    auto dir = std::filesystem::absolute(parent.empty() ? std::filesystem::path(".") : parent, ec);
    if (ec) return parent.empty() ? "." : parent.string();
    std::string text = dir.lexically_normal().string();
    while (!text.empty() && text.back() == '/') text.pop_back();  // "/" itself becomes ""
    return text;
}

const std::set<std::string>& environment_names() {
    static const std::set<std::string> k{"development", "test", "staging", "production"};
    return k;
}

void apply_map(const YAML::Node& root, Config& c, const std::string& environment, bool top_level) {
    // Ruby-only or legacy Sidekiq keys: accepted so an existing sidekiq.yml loads unchanged;
    // kiqd has nothing to do with them (strict/weighted follows the weights, as in Sidekiq 6.4.1).
    auto ignored = [](const std::string&, const YAML::Node&) {};
    auto limit_fetch_key = [&](const std::string&, const YAML::Node& v) {
        if (!c.limit_fetch.enabled) c.limit_fetch.line = line_of(v);
        c.limit_fetch.enabled = true;
    };
    auto warn = [&](const std::string& key, const YAML::Node& v, const std::string& what) {
        c.load_warnings.push_back(key + " (line " + std::to_string(line_of(v)) + "): " + what);
    };
    read_map(
        root, "",
        {{"concurrency",
          [&](const auto& key, const auto& v) {
              c.concurrency = static_cast<int>(as_int(key, v));
              if (c.concurrency < 1) throw ConfigError(key, "must be at least 1", line_of(v));
          }},
         {"timeout",
          [&](const auto& key, const auto& v) {
              c.timeout = std::chrono::milliseconds(seconds_to_ms(key, v));
              if (c.timeout.count() <= 0)
                  throw ConfigError(key, "must be greater than 0", line_of(v));
          }},
         {"queues", [&](const auto&, const auto& v) { c.queues = parse_queue_list("queues", v); }},
         {"fetch",
          [&](const auto& key, const auto& v) {
              c.fetch = parse_fetch_mode(key, as_string(key, v), line_of(v));
          }},
         {"reliable_fetch",
          [&](const auto&, const auto& v) { parse_reliable_fetch(v, c.reliable_fetch); }},
         {"prefetch",
          [&](const auto& key, const auto& v) { c.prefetch = fetch_batch_size(key, v); }},
         {"tag", [&](const auto& key, const auto& v) { c.tag = as_string(key, v); }},
         {"labels",
          [&](const auto& key, const auto& v) {
              if (!v.IsSequence()) type_error(key, v, "a list of strings");
              c.labels.clear();
              for (const auto& l : v) c.labels.push_back(as_string(key, l));
          }},
         {"verbose", [&](const auto& key, const auto& v) { c.verbose = as_bool(key, v); }},
         {"strict", ignored},
         {"require", ignored},
         {"pidfile", ignored},
         {"logfile", ignored},
         {"environment", ignored},
         {"compat",
          [&](const auto& key, const auto& v) {
              const std::string s = v.IsScalar() ? v.Scalar() : "";
              if (s != "auto" && s != "6" && s != "7" && s != "8")
                  throw ConfigError(key, "must be auto, 6, 7 or 8", line_of(v));
              c.compat_auto = s == "auto";
              // auto keeps the payload format of 6, which 6, 7 and 8 all read.
              c.compat = c.compat_auto ? Compat::v6 : static_cast<Compat>(s[0] - '0');
          }},
         {"redis", [&](const auto&, const auto& v) { parse_redis(v, c.redis); }},
         {"logging", [&](const auto&, const auto& v) { parse_logging(v, c.logging); }},
         {"max_retries",
          [&](const auto& key, const auto& v) {
              c.max_retries = static_cast<int>(as_int(key, v));
              c.max_retries_set = true;
              if (c.max_retries < 0) throw ConfigError(key, "must not be negative", line_of(v));
          }},
         {"dead_max_jobs",
          [&](const auto& key, const auto& v) {
              c.dead_max_jobs = as_int(key, v);
              c.dead_max_jobs_set = true;
              if (c.dead_max_jobs < 1) throw ConfigError(key, "must be at least 1", line_of(v));
          }},
         {"dead_timeout_in_seconds",
          [&](const auto& key, const auto& v) {
              c.dead_timeout_seconds = whole_seconds(key, v);
              c.dead_timeout_set = true;
              if (c.dead_timeout_seconds < 1)
                  throw ConfigError(key, "must be at least 1", line_of(v));
          }},
         {"average_scheduled_poll_interval",
          [&](const auto& key, const auto& v) {
              c.average_scheduled_poll_interval = seconds_number(key, v);
              if (c.average_scheduled_poll_interval <= 0)
                  throw ConfigError(key, "must be greater than 0", line_of(v));
          }},
         {"poll_interval_average",
          [&](const auto& key, const auto& v) {
              c.poll_interval_average = seconds_number(key, v);
              if (*c.poll_interval_average <= 0)
                  throw ConfigError(key, "must be greater than 0", line_of(v));
          }},
         {"max_payload_bytes",
          [&](const auto& key, const auto& v) {
              long long b = as_int(key, v);
              if (b < 1024) throw ConfigError(key, "must be at least 1024", line_of(v));
              c.max_payload_bytes = static_cast<size_t>(b);
          }},
         {"server_middleware",
          [&](const auto&, const auto& v) { c.server_middleware = parse_middleware(v); }},
         {"handlers",
          [&](const auto&, const auto& v) {
              c.runner_handlers.clear();
              c.exec_handlers = parse_handlers(v, c.classes, c.runner_handlers);
          }},
         {"runners", [&](const auto&, const auto& v) { c.runners = parse_runners(v); }},
         {"unique_jobs", [&](const auto&, const auto& v) { parse_unique_jobs(v, c.unique_jobs); }},
         {"pause_control",
          [&](const auto&, const auto& v) { parse_pause_control_config(v, c.pause_control); }},
         {"concurrency_limits",
          [&](const auto&, const auto& v) { parse_concurrency_limits(v, c.concurrency_limits); }},
         {"fair_tenant", [&](const auto&, const auto& v) { parse_fair_tenant(v, c.fair_tenant); }},
         {"fair_fetch", [&](const auto&, const auto& v) { parse_fair_fetch(v, c.fair_fetch); }},
         {"plugins",
          [&](const auto&, const auto& v) { c.plugins = parse_plugins(v, config_directory(c)); }},
         {"routing_rules",
          [&](const auto&, const auto& v) { c.routing_rules = parse_routing_rules(v); }},
         {"selector",
          [&](const auto& key, const auto& v) {
              c.selector = non_empty_string(key, v);
              c.selector_line = line_of(v);
              try {
                  WorkerSelector::parse(c.selector);
              } catch (const std::invalid_argument& e) {
                  throw ConfigError(key, e.what(), line_of(v));
              }
          }},
         {"metrics", [&](const auto&, const auto& v) { parse_metrics(v, c.metrics); }},
         {"cpu_bound_concurrency",
          [&](const auto& key, const auto& v) {
              c.cpu_bound_concurrency = static_cast<int>(as_int(key, v));
              if (c.cpu_bound_concurrency < 1 || c.cpu_bound_concurrency > 1000)
                  throw ConfigError(key, "must be between 1 and 1000", line_of(v));
          }},
         {"job_metadata",
          [&](const auto& key, const auto& v) { c.job_metadata = as_bool(key, v); }},
         {"lifecycle_events",
          [&](const auto& key, const auto& v) {
              warn(key, v,
                   "ignored: Sidekiq's lifecycle events are Ruby blocks of an initializer; kiqd "
                   "runs no Ruby at startup or shutdown (use systemd's ExecStartPre/ExecStopPost)");
          }},
         {"capsules", [&](const auto&, const auto& v) { c.capsules = parse_capsules(v); }},
         // sidekiq-limit_fetch's keys: kiqd then fetches as the gem does.
         {"limits",
          [&](const auto& key, const auto& v) {
              parse_queue_limits(key, v, c.limit_fetch.limits);
              limit_fetch_key(key, v);
          }},
         {"process_limits",
          [&](const auto& key, const auto& v) {
              parse_queue_limits(key, v, c.limit_fetch.process_limits);
              limit_fetch_key(key, v);
          }},
         {"blocking",
          [&](const auto& key, const auto& v) {
              parse_blocking(key, v, c.limit_fetch.blocking);
              limit_fetch_key(key, v);
          }},
         {"cron", [&](const auto&, const auto& v) { parse_cron(v, c); }},
         {"cron_schedule_file",
          [&](const auto& key, const auto& v) { load_cron_schedule_file(key, v, c); }},
         {"scheduler", [&](const auto&, const auto& v) { parse_scheduler(v, c.cron); }},
         {"schedule", [&](const auto& key, const auto& v) { parse_schedule_map(key, v, c.cron); }},
         {"cron_poll_interval",
          [&](const auto& key, const auto& v) {
              c.cron_poll_interval = seconds_number(key, v);
              c.cron_poll_interval_set = true;
              if (c.cron_poll_interval < 0)
                  throw ConfigError(key, "must not be negative (0 turns the poller off)",
                                    line_of(v));
          }}},
        "unknown key",
        // Keys that are not strings, and the environment sub-hashes (production: {...}).
        [&](const std::string& name, const std::string&, const YAML::Node& key_node,
            const YAML::Node& v) {
            if (!key_node.IsScalar())
                throw ConfigError("?", "keys must be strings", line_of(key_node));
            if (key_node.Scalar().empty())
                throw ConfigError("(empty key)", "keys must not be empty", line_of(key_node));
            if (!top_level || !(environment_names().count(name) || name == environment) ||
                !v.IsMap())
                return false;
            if (name == environment) apply_map(v, c, environment, false);
            return true;
        });
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
    check_cron_names(c.cron);
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
    config_detail::check_capsules(c);
    if (c.limit_fetch.enabled) config_detail::check_limit_fetch(c, "limits");
    resolve_redis_endpoint(c.redis);
    config_detail::validate_runners(c);
    config_detail::check_fair_fetch(c);
    if (c.cpu_bound_concurrency == 0)
        c.cpu_bound_concurrency =
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace kiqd