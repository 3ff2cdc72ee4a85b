// The `runners:` section: pools of long-lived worker processes (docs/runner-protocol.md).
// Config is built once on the main thread, then read-only.
#include "config/runners_config.hpp"

#include <algorithm>
#include <thread>

#include "config/yaml_helpers.hpp"

namespace kiqd::config_detail {
namespace {

RunnerSpec parse_runner(const std::string& base, const YAML::Node& entry, int line) {
    RunnerSpec r;
    r.line = line;
    read_map(entry, base,
             {{"command",
               [&](const auto& key, const auto& v) {
                   if (!v.IsSequence() || v.size() == 0)
                       type_error(key, v, "a non-empty list: [command, args...] (no shell)");
                   for (const auto& a : v) r.argv.push_back(as_string(key, a));
                   if (r.argv[0].empty())
                       throw ConfigError(key, "the command must not be empty", line_of(v));
               }},
              {"processes",
               [&](const auto& key, const auto& v) {
                   const long long n = as_int(key, v);
                   if (n < 1 || n > 1000)
                       throw ConfigError(key, "must be between 1 and 1000", line_of(v));
                   r.processes = static_cast<int>(n);
               }},
              {"max_jobs",
               [&](const auto& key, const auto& v) {
                   r.max_jobs = as_int(key, v);
                   if (r.max_jobs < 1) throw ConfigError(key, "must be at least 1", line_of(v));
               }},
              {"max_rss_mb",
               [&](const auto& key, const auto& v) {
                   r.max_rss_mb = as_int(key, v);
                   if (r.max_rss_mb < 1 || r.max_rss_mb > 1024 * 1024)
                       throw ConfigError(key, "must be between 1 and 1048576", line_of(v));
               }},
              {"boot_timeout",
               [&](const auto& key, const auto& v) { r.boot_timeout = positive_seconds(key, v); }},
              {"threads",
               [&](const auto& key, const auto& v) {
                   const long long n = as_int(key, v);
                   if (n < 1 || n > 1024)
                       throw ConfigError(key, "must be between 1 and 1024", line_of(v));
                   r.threads = static_cast<int>(n);
               }},
              {"env",
               [&](const auto& key, const auto& v) {
                   if (!v.IsMap()) type_error(key, v, "a map of variable name → value");
                   for (const auto& e : v) {
                       const std::string name = e.first.IsScalar() ? e.first.Scalar() : "";
                       if (name.empty() || name.find_first_of("=\0") != std::string::npos ||
                           (name[0] >= '0' && name[0] <= '9'))
                           throw ConfigError(key, "variable names are non-empty, without '='",
                                             line_of(e.first));
                       if (!e.second.IsScalar()) type_error(key + "." + name, e.second, "a string");
                       r.env.emplace_back(name, e.second.Scalar());
                   }
               }},
              {"preload", [&](const auto& key, const auto& v) { r.preload = as_bool(key, v); }}},
             "unknown key (command, processes, threads, env, max_jobs, max_rss_mb, boot_timeout, "
             "preload)");
    if (r.argv.empty()) throw ConfigError(base + ".command", "is required", r.line);
    return r;
}

}  // namespace

std::vector<RunnerSpec> parse_runners(const YAML::Node& n) {
    if (!n.IsMap()) type_error("runners", n, "a map of runner name → {command: [...], ...}");
    std::vector<RunnerSpec> out;
    for (const auto& kv : n) {
        if (!kv.first.IsScalar())
            throw ConfigError("runners", "runner names must be strings", line_of(kv.first));
        const std::string name = kv.first.Scalar();
        const std::string base = "runners." + name;
        const int line = line_of(kv.first);
        if (name.empty()) throw ConfigError(base, "empty runner name", line);
        if (name.find_first_not_of(
                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
            std::string::npos)
            throw ConfigError(base, "names use letters, digits, _ and - only", line);
        if (!kv.second.IsMap()) type_error(base, kv.second, "a map {command: [...], ...}");
        RunnerSpec r = parse_runner(base, kv.second, line);
        r.name = name;
        out.push_back(std::move(r));
    }
    return out;
}

void validate_runners(Config& c) {
    for (const auto& h : c.runner_handlers) {
        const bool known = std::any_of(c.runners.begin(), c.runners.end(),
                                       [&](const RunnerSpec& r) { return r.name == h.runner; });
        if (!known) {
            std::string names;
            for (const auto& r : c.runners) names += (names.empty() ? "" : ", ") + r.name;
            throw ConfigError("handlers." + h.job_class + ".runner",
                              "names no runner '" + h.runner +
                                  "' (runners: " + (names.empty() ? "none defined" : names) + ")",
                              h.line);
        }
    }
    for (auto& r : c.runners) {
        if (r.processes == 0)
            r.processes = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        // As many jobs in flight as Sidekiq with the same concurrency, over `processes`.
        if (r.threads == 0)
            r.threads = std::clamp((total_concurrency(c) + r.processes - 1) / r.processes, 1, 1024);
    }
}

}  // namespace kiqd::config_detail
