// `kiqd pause`, `kiqd resume` and `kiqd paused` (see pause_commands.hpp).
#include "admin/pause_commands.hpp"

#include <chrono>

#include "admin/exit_codes.hpp"
#include "admin/sidekiq_api.hpp"
#include "admin/table.hpp"
#include "common/control_escape.hpp"
#include "middleware/pause/pause_control.hpp"

namespace kiqd::admin {

int cmd_pause(redis::Connection& conn, const Keys& keys, const Config& config, const Request& r,
              std::ostream& out, std::ostream& err) {
    const bool pause = r.command == "pause";
    if ((r.action != "worker" && r.action != "queue") || r.targets.size() != 1 ||
        r.targets[0].empty()) {
        err << "kiqd: usage: kiqd " << r.command << " worker CLASS | " << r.command << " queue NAME"
            << std::endl;
        return kExitNotFound;
    }
    const std::string& name = r.targets[0];
    const bool changed = set_paused(conn, keys, r.action, name, pause);
    const auto refresh = std::chrono::duration<double>(config.pause_control.refresh_interval);
    if (r.json) {
        out << json_text(
                   {{"kind", r.action}, {"name", name}, {"paused", pause}, {"changed", changed}})
            << "\n";
        return 0;
    }
    out << r.action << " " << escape_control(name) << (changed ? " is now " : " was already ")
        << (pause ? "paused" : "resumed");
    if (changed && pause && r.action == "worker")
        out << ": kiqd processes park its jobs within " << refresh.count() << " s";
    else if (changed && pause)
        out << ": kiqd processes stop fetching from it within " << refresh.count() << " s";
    else if (changed && r.action == "worker")
        out << ": its parked jobs (" << escape_control(pause_control_worker_name(name))
            << ") go back to their queues at the next resume round";
    out << "\n";
    return 0;
}

int cmd_paused(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    const auto report = fetch_paused(conn, keys);
    if (r.json) {
        ojson queues = ojson::array(), workers = ojson::array();
        for (const auto& q : report.queues) queues.push_back({{"name", q.name}, {"size", q.size}});
        for (const auto& w : report.workers)
            workers.push_back({{"class", w.job_class},
                               {"paused", w.paused},
                               {"parked", w.parked},
                               {"strategy", w.strategy}});
        out << json_text({{"queues", queues}, {"workers", workers}}) << "\n";
        return 0;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& q : report.queues)
        rows.push_back({"queue", q.name, "paused", std::to_string(q.size) + " queued"});
    for (const auto& w : report.workers)
        rows.push_back({"worker", w.job_class,
                        w.paused ? "paused" : (w.strategy == "manual" ? "resuming" : w.strategy),
                        std::to_string(w.parked) + " parked"});
    if (rows.empty()) {
        out << "nothing is paused\n";
        return 0;
    }
    print_table(out, {"KIND", "NAME", "STATE", "JOBS"}, rows, !r.no_headers);
    return 0;
}

}  // namespace kiqd::admin
