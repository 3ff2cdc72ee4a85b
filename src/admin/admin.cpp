// The admin command dispatcher (see admin.hpp).
#include "admin/admin.hpp"

#include "admin/admin_connection.hpp"
#include "admin/cron_commands.hpp"
#include "admin/escaped_output.hpp"
#include "admin/pause_commands.hpp"
#include "admin/process_commands.hpp"
#include "admin/set_commands.hpp"
#include "admin/stats_commands.hpp"
#include "admin/unique_commands.hpp"
#include "common/control_escape.hpp"

namespace kiqd::admin {

int run_admin(const Request& r, const Config& config, std::ostream& raw_out,
              std::ostream& raw_err) {
    EscapedOutput out(raw_out), err(raw_err);
    const Keys keys(config.redis.key_prefix);
    const redis::ConnectionOptions options = admin_connection_options(config, "admin");
    try {
        redis::Connection conn(options);
        conn.connect();
        if (r.command == "stats") return cmd_stats(conn, keys, r, out);
        if (r.command == "queues") return cmd_queues(conn, keys, r, out);
        if (r.command == "processes") return cmd_processes(conn, keys, r, out);
        if (r.command == "retries" || r.command == "dead")
            return cmd_set(conn, keys, config, r, out, err);
        if (r.command == "quiet" || r.command == "stop") return cmd_signal(conn, keys, r, out, err);
        if (r.command == "pause" || r.command == "resume")
            return cmd_pause(conn, keys, config, r, out, err);
        if (r.command == "paused") return cmd_paused(conn, keys, r, out);
        if (r.command == "unique") return cmd_unique(conn, keys, r, out, err);
        if (r.command == "cron") return cmd_cron(conn, keys, config, r, out);
        err << "kiqd: unknown admin command " << escape_control(r.command) << std::endl;
        return kExitNotFound;
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
