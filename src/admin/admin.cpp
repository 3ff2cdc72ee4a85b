// The admin command dispatcher (see admin.hpp).
#include "admin/admin.hpp"

#include <unistd.h>

#include <iostream>
#include <sstream>

#include "admin/admin_connection.hpp"
#include "admin/cron_commands.hpp"
#include "admin/escaped_output.hpp"
#include "admin/fair_fetch_commands.hpp"
#include "admin/job_commands.hpp"
#include "admin/pause_commands.hpp"
#include "admin/process_commands.hpp"
#include "admin/set_commands.hpp"
#include "admin/stats_commands.hpp"
#include "admin/top.hpp"
#include "admin/unique_commands.hpp"
#include "common/control_escape.hpp"

namespace kiqd::admin {
namespace {

int dispatch(redis::Connection& conn, const Keys& keys, const Config& config, const Request& r,
             std::ostream& out, std::ostream& err) {
    if (r.command == "stats") return cmd_stats(conn, keys, r, out);
    if (r.command == "queues") return cmd_queues(conn, keys, r, out);
    if (r.command == "processes") return cmd_processes(conn, keys, r, out);
    if (r.command == "retries" || r.command == "dead")
        return cmd_set(conn, keys, config, r, out, err);
    if (r.command == "quiet" || r.command == "stop") return cmd_signal(conn, keys, r, out, err);
    if (r.command == "pause" || r.command == "resume")
        return cmd_pause(conn, keys, config, r, out, err);
    if (r.command == "paused") return cmd_paused(conn, keys, r, out);
    if (r.command == "fair-fetch") return cmd_fair_fetch(conn, keys, config, r, out, err);
    if (r.command == "busy") return cmd_busy(conn, keys, r, out);
    if (r.command == "scheduled") return cmd_scheduled(conn, keys, r, out);
    if (r.command == "queue")
        return cmd_queue(conn, keys, r, out, err, std::cin,
                         ::isatty(STDIN_FILENO) && ::isatty(STDERR_FILENO));
    if (r.command == "job") return cmd_job(conn, keys, r, out);
    if (r.command == "unique") return cmd_unique(conn, keys, r, out, err);
    if (r.command == "cron") return cmd_cron(conn, keys, config, r, out);
    err << "kiqd: unknown admin command " << escape_control(r.command) << std::endl;
    return kExitNotFound;
}

}  // namespace

int run_admin(const Request& request, const Config& config, std::ostream& raw_out,
              std::ostream& raw_err) {
    EscapedOutput out(raw_out), err(raw_err);
    const Keys keys(config.redis.key_prefix);
    const redis::ConnectionOptions options = admin_connection_options(config, "admin");
    Request r = request;
    r.redis_endpoint = options.describe();
    try {
        redis::Connection conn(options);
        conn.connect();
        // top draws on the terminal itself (raw_out: its own escaping, its own screen control).
        if (r.command == "top") return run_top(conn, keys, r, raw_out);
        // The command's output is held until it is done, so that text output can begin with the
        // Redis it read, and an error leaves stdout empty.
        std::ostringstream body;
        const int code = dispatch(conn, keys, config, r, body, err);
        if (!body.str().empty()) {
            if (!r.json && !r.no_headers)
                out << "Redis " << r.redis_endpoint << " (" << r.redis_source << ")\n";
            out << body.str();
        }
        return code;
    } catch (const NotFound& e) {
        err << "kiqd: " << r.command << ": " << escape_control(e.what()) << std::endl;
        return kExitNotFound;
    } catch (const redis::Error& e) {
        err << "kiqd: " << r.command << ": " << escape_control(describe_redis_error(e, options))
            << std::endl;
        return kExitUnavailable;
    }
}

}  // namespace kiqd::admin
