#pragma once
// `kiqd stats` and `kiqd queues`: the cluster's counters and its queues, as a table or JSON
// (--json). Read-only. The admin CLI is single-threaded.
#include <ostream>

#include "admin/request.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd::admin {

int cmd_stats(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out);
int cmd_queues(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out);

}  // namespace kiqd::admin
