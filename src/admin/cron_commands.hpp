#pragma once
// `kiqd cron [--json]`: every schedule — sidekiq-cron's jobs in Redis (created by the gem's API,
// its Web UI, a Ruby schedule loader, or written by kiqd from its YAML) and the YAML's schedules
// no kiqd process has written yet — with status, last enqueue time (the gem's field) and next
// run (fugit's next_time of the cron line). The admin CLI is single-threaded.
#include <ostream>

#include "admin/request.hpp"
#include "kiqd/config.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd::admin {

int cmd_cron(redis::Connection& conn, const Keys& keys, const Config& config, const Request& r,
             std::ostream& out);

}  // namespace kiqd::admin
