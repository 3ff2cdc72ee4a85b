// `kiqd stats` and `kiqd queues` (see stats_commands.hpp): sidekiq_api.hpp reads, table.hpp or
// JSON prints.
#include "admin/stats_commands.hpp"

#include "admin/sidekiq_api.hpp"
#include "admin/table.hpp"

namespace kiqd::admin {

int cmd_stats(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    const Stats s = fetch_stats(conn, keys);
    if (r.json) {
        out << json_text({{"processed", s.processed},
                          {"failed", s.failed},
                          {"busy", s.busy},
                          {"enqueued", s.enqueued},
                          {"scheduled", s.scheduled},
                          {"retries", s.retries},
                          {"dead", s.dead},
                          {"processes", s.processes},
                          {"default_queue_latency", s.default_queue_latency}})
            << "\n";
        return 0;
    }
    print_table(out, {"STAT", "VALUE"},
                {{"processed", std::to_string(s.processed)},
                 {"failed", std::to_string(s.failed)},
                 {"busy", std::to_string(s.busy)},
                 {"enqueued", std::to_string(s.enqueued)},
                 {"scheduled", std::to_string(s.scheduled)},
                 {"retries", std::to_string(s.retries)},
                 {"dead", std::to_string(s.dead)},
                 {"processes", std::to_string(s.processes)},
                 {"default queue latency", fixed(s.default_queue_latency, 2) + " s"}},
                !r.no_headers);
    return 0;
}

int cmd_queues(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    const auto queues = fetch_queues(conn, keys);
    if (r.json) {
        ojson a = ojson::array();
        for (const auto& q : queues)
            a.push_back({{"name", q.name}, {"size", q.size}, {"latency", q.latency}});
        out << json_text(a) << "\n";
        return 0;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& q : queues)
        rows.push_back({q.name, std::to_string(q.size), fixed(q.latency, 2) + " s"});
    print_table(out, {"QUEUE", "SIZE", "LATENCY"}, rows, !r.no_headers);
    return 0;
}

}  // namespace kiqd::admin
