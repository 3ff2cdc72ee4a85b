// `kiqd processes`, `kiqd quiet` and `kiqd stop` (see process_commands.hpp).
#include "admin/process_commands.hpp"

#include <algorithm>

#include "admin/exit_codes.hpp"
#include "admin/sidekiq_api.hpp"
#include "admin/table.hpp"
#include "common/control_escape.hpp"

namespace kiqd::admin {

namespace {

// A process's runner children (its `kiqd_runners` field); an empty array when it has none or
// the field is not the array kiqd writes.
ojson runner_children(const ProcessInfo& p) {
    auto a = ojson::parse(p.runners, nullptr, false);
    return a.is_array() ? a : ojson::array();
}

std::string text_of(const ojson& row, const char* key) {
    auto it = row.find(key);
    if (it == row.end()) return "";
    return it->is_string() ? it->get<std::string>() : it->dump();
}

}  // namespace

int cmd_processes(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    const auto procs = fetch_processes(conn, keys);
    const double now = epoch_seconds();
    if (r.json) {
        ojson a = ojson::array();
        for (const auto& p : procs) {
            a.push_back({{"identity", p.identity},
                         {"runners", runner_children(p)},
                         {"hostname", p.hostname},
                         {"pid", p.pid},
                         {"tag", p.tag},
                         {"labels", p.labels},
                         {"queues", p.queues},
                         {"concurrency", p.concurrency},
                         {"busy", p.busy},
                         {"rss_kb", p.rss_kb},
                         {"beat", p.beat},
                         {"beat_iso", utc_time(p.beat)},
                         {"started_at", p.started_at},
                         {"started_at_iso", utc_time(p.started_at)},
                         {"quiet", p.quiet}});
            // Sidekiq 7 capsules (kiqd's own field): only for processes that have some.
            if (!p.capsules.empty()) {
                ojson caps = ojson::object();
                for (const auto& c : p.capsules)
                    caps[c.name] = {{"busy", c.busy}, {"concurrency", c.concurrency}};
                a.back()["capsules"] = caps;
            }
        }
        out << json_text(a) << "\n";
        return 0;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& p : procs)
        rows.push_back({p.identity, p.tag,
                        std::to_string(p.busy) + "/" + std::to_string(p.concurrency),
                        fixed(p.rss_kb / 1024.0, 1) + " MB", human_duration(now - p.beat) + " ago",
                        p.quiet ? "yes" : "no", join(p.queues, ","), utc_time(p.started_at)});
    std::vector<std::string> headers{"IDENTITY",  "TAG",   "BUSY",   "RSS",
                                     "LAST BEAT", "QUIET", "QUEUES", "STARTED"};
    add_capsules_column(procs, 3, headers, rows);
    print_table(out, headers, rows, !r.no_headers);
    // The runner children, under their processes (only when some process has any).
    std::vector<std::vector<std::string>> children;
    for (const auto& p : procs)
        for (const auto& c : runner_children(p)) {
            if (!c.is_object()) continue;
            const auto rss = c.value("rss_kb", 0LL);
            const std::string job =
                c.contains("jid") ? text_of(c, "class") + " " + text_of(c, "jid") : "";
            children.push_back({p.identity, text_of(c, "runner"), text_of(c, "slot"),
                                text_of(c, "pid"), text_of(c, "state"), text_of(c, "jobs"),
                                fixed(static_cast<double>(rss) / 1024.0, 1) + " MB", job});
        }
    if (!children.empty()) {
        out << "\n";
        print_table(out, {"PROCESS", "RUNNER", "SLOT", "PID", "STATE", "JOBS", "RSS", "JOB"},
                    children, !r.no_headers);
    }
    return 0;
}

int cmd_signal(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out,
               std::ostream& err) {
    const std::string signal = r.command == "quiet" ? "TSTP" : "TERM";
    if (r.targets.empty() == !r.all) {
        err << "kiqd: " << r.command << ": give one or more IDENTITY or --all (see kiqd processes)"
            << std::endl;
        return kExitNotFound;
    }
    const auto procs = fetch_processes(conn, keys);
    std::vector<std::string> ids;
    if (r.all) {
        for (const auto& p : procs) ids.push_back(p.identity);
    } else {
        for (const auto& id : r.targets) {
            const bool live = std::any_of(procs.begin(), procs.end(),
                                          [&](const ProcessInfo& p) { return p.identity == id; });
            if (!live) throw NotFound("no live process with identity " + id);
            ids.push_back(id);
        }
    }
    for (const auto& id : ids) send_signal(conn, keys, id, signal);
    if (r.json) {
        out << json_text({{"signal", signal}, {"identities", ids}}) << "\n";
    } else {
        for (const auto& id : ids)
            out << r.command << ": sent " << signal << " to " << escape_control(id) << "\n";
        if (ids.empty()) out << r.command << ": no live processes\n";
    }
    return 0;
}

}  // namespace kiqd::admin
