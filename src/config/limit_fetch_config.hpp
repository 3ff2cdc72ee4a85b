#pragma once
// Readers of sidekiq-limit_fetch's sidekiq.yml keys (`limits:`, `process_limits:`, `blocking:`,
// config.hpp LimitFetchConfig), and the check that keeps limit fetch to what kiqd serves with
// it. Main thread, while the config is built.
#include <yaml-cpp/yaml.h>

#include <string>

#include "kiqd/config.hpp"

namespace kiqd::config_detail {

// `limits:` / `process_limits:`: {queue: N}, N a whole number from 0 (as the gem takes it).
void parse_queue_limits(const std::string& key, const YAML::Node& n,
                        std::map<std::string, long long>& out);
// `blocking:` [queue, [queue, queue], ...].
void parse_blocking(const std::string& key, const YAML::Node& n,
                    std::vector<std::vector<std::string>>& out);

// Limit fetch takes one job at a time from the default capsule's queues with basic fetch:
// ConfigError naming the key when combined with reliable fetch, prefetch, capsules or fair
// queues. `key` names what turned it on ("limits", or the app's gem).
void check_limit_fetch(const Config& c, const std::string& key);

}  // namespace kiqd::config_detail
