#pragma once
// The optional top-level sections of the config, one reader each (their structs are in
// kiqd/config.hpp). Each throws ConfigError naming the key. Config is built once on the main
// thread, then read-only.
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "kiqd/config.hpp"

namespace kiqd::config_detail {

// Jobs fetched per round trip (reliable_fetch.batch_size, prefetch): 1 to kMaxBatchSize.
int fetch_batch_size(const std::string& key, const YAML::Node& v);

void parse_reliable_fetch(const YAML::Node& n, ReliableFetchConfig& r);
void parse_logging(const YAML::Node& n, LoggingConfig& l);
std::vector<MiddlewareSpec> parse_middleware(const YAML::Node& n);
std::vector<RoutingRule> parse_routing_rules(const YAML::Node& n);
void parse_metrics(const YAML::Node& n, MetricsConfig& m);
void parse_concurrency_limits(const YAML::Node& n, ConcurrencyLimitsConfig& c);
void parse_fair_tenant(const YAML::Node& n, FairTenantConfig& f);
void parse_unique_jobs(const YAML::Node& n, UniqueJobsConfig& u);
void parse_pause_control_config(const YAML::Node& n, PauseControlConfig& p);
// `plugins:`; a relative path is resolved against `config_dir` (the config file's directory,
// absolute), not the working directory, which under systemd is the state directory.
std::vector<PluginSpec> parse_plugins(const YAML::Node& n, const std::string& config_dir);

// The gem's own environment variables (SIDEKIQ_FAIR_TENANT_ENQUEUES_KEY,
// SIDEKIQ_FAIR_TENANT_MAX_THROTTLING_WINDOW) for what `fair_tenant:` did not set.
void apply_fair_tenant_environment(FairTenantConfig& f);

}  // namespace kiqd::config_detail
