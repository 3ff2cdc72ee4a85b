#pragma once
// The job-level admin commands: `kiqd busy` (running jobs across the cluster), `kiqd scheduled`,
// `kiqd queue ls|clear NAME` and `kiqd job JID` (where a job is, with its args, error and
// decoded backtrace). Tables or --json; every stored string escaped. The admin CLI is
// single-threaded.
#include <istream>
#include <ostream>

#include "admin/request.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd::admin {

int cmd_busy(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out);
int cmd_scheduled(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out);
// `queue clear` asks on `err` and reads the answer from `in` when `interactive` (stdin and
// stderr are terminals) and --yes is not given; refuses (exit 1) when not interactive and no
// --yes.
int cmd_queue(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out,
              std::ostream& err, std::istream& in, bool interactive);
// Throws NotFound when no job has that jid.
int cmd_job(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out);

}  // namespace kiqd::admin
