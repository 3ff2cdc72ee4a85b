#pragma once
// The schedule sections of the config: kiqd's `cron:` (a list of {name, cron, class, args,
// queue, ...}, or a map name → {...} as sidekiq-cron's schedule.yml), sidekiq-scheduler's
// `:scheduler: {:schedule: {...}}` and a top-level `:schedule:` of a sidekiq.yml, and
// `cron_poll_interval`. Every entry is checked here — the cron line parsed as fugit would, the
// class, the queue name, the args — so a bad one is exit 78 naming its key and line before
// anything touches Redis. Config is built once on the main thread, then read-only.
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "kiqd/config.hpp"

namespace kiqd::config_detail {

// `cron:` (kiqd's own form): a list of schedules, or a map of name → schedule which may also
// hold the settings `layout`, `namespace`, `namespaces` and a `schedule` list or map.
void parse_cron(const YAML::Node& n, Config& c);
// `cron_schedule_file:` (sidekiq-cron's `config/schedule.yml`): the file read as the gem reads
// it — ERB, then a map name → job or a list of jobs — relative to the working directory, with
// the gem's fallback from .yml to .yaml. A file named here that is missing is exit 78.
void load_cron_schedule_file(const std::string& key, const YAML::Node& n, Config& c);
// `scheduler:` (sidekiq-scheduler's section): its `schedule:` entries; `enabled: false` turns
// the whole section off, as it does in sidekiq-scheduler; its other settings are ignored.
void parse_scheduler(const YAML::Node& n, std::vector<CronScheduleSpec>& out);
// A map name → {cron, class, ...} under `key` ("schedule", "scheduler.schedule").
void parse_schedule_map(const std::string& key, const YAML::Node& n,
                        std::vector<CronScheduleSpec>& out);
// After all sections are read: names are unique.
void check_cron_names(const std::vector<CronScheduleSpec>& specs);

}  // namespace kiqd::config_detail
