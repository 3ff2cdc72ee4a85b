#pragma once
// Readers of the queue lists and Sidekiq 7's `capsules:` section (config.hpp CapsuleConfig),
// and the checks that keep capsules apart once the whole config is known. Main thread, while
// the config is built.
#include <string>
#include <vector>

#include "kiqd/config.hpp"

namespace kiqd::config_detail {

// A `queues:` list: names or [name, weight] pairs. `key` names it in messages ("queues",
// "capsules.reports.queues"). With `split_commas` a "name,weight" string is a pair too, as
// Sidekiq's Capsule#queues= reads its entries.
std::vector<QueueWeight> parse_queue_list(const std::string& key, const YAML::Node& n,
                                          bool split_commas = false);

// `capsules: {NAME: {concurrency: N, queues: [...]}}`, in file order.
std::vector<CapsuleConfig> parse_capsules(const YAML::Node& n);

// After command-line overrides: every capsule has queues and a concurrency in range, no queue
// is served by two capsules (default included), and nothing is combined with capsules that
// kiqd serves from one fetcher only (reliable fetch, a selector, fair queues outside the
// default capsule). Throws ConfigError naming the key.
void check_capsules(const Config& c);

}  // namespace kiqd::config_detail
