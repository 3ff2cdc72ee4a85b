#pragma once
// `kiqd unique locks [--stale] [--json]` — every unique lock (kiqd's run locks and the gem's
// client locks) with its holder, its age and whether the holder is still there
// (lock_survey.hpp); `--stale` keeps only those whose holder is gone — and
// `kiqd unique unlock DIGEST`, which frees every lock of one identity (the stuck-lock
// watchdog's manual half; the LockKeeper's reaper is the automatic one). The admin CLI is
// single-threaded.
#include <ostream>

#include "admin/request.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd::admin {

int cmd_unique(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out,
               std::ostream& err);

}  // namespace kiqd::admin
