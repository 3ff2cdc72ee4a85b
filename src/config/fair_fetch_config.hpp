#pragma once
// The `fair_fetch:` section: which queues are served tenant by tenant (fair_fetcher.hpp), where
// each job's tenant is read (`{arg: N}` or `{key: NAME}`), tenant weights and the cap on
// tenants tracked. Top-level `weights:` and `max_tenants:` apply to every fair queue; a queue
// may set its own. A bad entry is exit 78 naming its key and line; a fair queue that is not in
// `queues:` is caught by check_fair_fetch once the queues are final (after -q overrides).
// Config is built once on the main thread, then read-only.
#include <yaml-cpp/yaml.h>

#include "kiqd/config.hpp"

namespace kiqd::config_detail {

void parse_fair_fetch(const YAML::Node& n, FairFetchConfig& out);
// Every fair queue is one of `queues`. Throws ConfigError naming fair_fetch.<queue>.
void check_fair_fetch(const Config& c);

}  // namespace kiqd::config_detail
