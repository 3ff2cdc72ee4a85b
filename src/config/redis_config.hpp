#pragma once
// The `redis:` section of the config (see RedisConfig in kiqd/config.hpp). Config is built once
// on the main thread, then read-only.
#include <yaml-cpp/yaml.h>

#include "kiqd/config.hpp"

namespace kiqd::config_detail {

// `redis:` as a URL or a map; throws ConfigError.
void parse_redis(const YAML::Node& n, RedisConfig& r);

// After command-line overrides: the URL (else REDIS_URL, else the local default) with
// username/password applied, into r.endpoint; throws ConfigError for conflicting sources.
void resolve_redis_endpoint(RedisConfig& r);

}  // namespace kiqd::config_detail
