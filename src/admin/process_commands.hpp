#pragma once
// `kiqd processes` (the live processes, as a table or JSON) and `kiqd quiet|stop` (TSTP or TERM
// to named processes or --all, through their signal lists). The admin CLI is single-threaded.
#include <ostream>

#include "admin/request.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd::admin {

int cmd_processes(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out);
// Throws NotFound for an identity that is not a live process (before signalling any).
int cmd_signal(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out,
               std::ostream& err);

}  // namespace kiqd::admin
