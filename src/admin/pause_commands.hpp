#pragma once
// `kiqd pause|resume worker CLASS|queue NAME` (SADD/SREM in the paused sets that kiqd's pause
// control polls) and `kiqd paused` (what is paused and what waits). The admin CLI is
// single-threaded.
#include <ostream>

#include "admin/request.hpp"
#include "kiqd/config.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd::admin {

int cmd_pause(redis::Connection& conn, const Keys& keys, const Config& config, const Request& r,
              std::ostream& out, std::ostream& err);
int cmd_paused(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out);

}  // namespace kiqd::admin
