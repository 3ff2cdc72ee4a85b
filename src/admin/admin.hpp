#pragma once
// The admin command line (`kiqd stats|queues|processes|retries|dead|quiet|stop|pause|resume|
// paused|busy|scheduled|queue|job|top`): run_admin opens one Redis connection, runs the command
// (the *_commands files, top.hpp), starts text output with the Redis it read, and maps failures
// to exit codes. enqueue.hpp is included so the CLI gets both of its entry points
// (run_admin, run_enqueue) from this header. Single-threaded, on the caller's thread.
#include <ostream>

#include "admin/enqueue.hpp"
#include "admin/exit_codes.hpp"
#include "admin/request.hpp"
#include "kiqd/config.hpp"

namespace kiqd::admin {

// Errors are one line on `err`; the exit codes are exit_codes.hpp's.
int run_admin(const Request& request, const Config& config, std::ostream& out, std::ostream& err);

}  // namespace kiqd::admin
