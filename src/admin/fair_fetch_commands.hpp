#pragma once
// `kiqd fair-fetch status QUEUE` (tenants waiting in a fair queue, fair_drain.hpp) and
// `kiqd fair-fetch drain QUEUE` (every job back into the plain queue, in enqueue order: how
// fair fetch is turned off). The admin CLI is single-threaded.
#include <ostream>

#include "admin/request.hpp"
#include "kiqd/config.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd::admin {

int cmd_fair_fetch(redis::Connection& conn, const Keys& keys, const Config& config,
                   const Request& r, std::ostream& out, std::ostream& err);

}  // namespace kiqd::admin
