// `kiqd cron` (see cron_commands.hpp).
#include "admin/cron_commands.hpp"

#include <algorithm>
#include <set>
#include <tuple>

#include "admin/table.hpp"
#include "cron/cron_expression.hpp"
#include "cron/cron_store.hpp"
#include "kiqd/clock.hpp"

namespace kiqd::admin {
namespace {

struct Row {
    std::string ns;  // the 2.x namespace; "" in sidekiq-cron 1.x's layout
    std::string name, status, cron, klass, queue, source, last_text;
    std::optional<std::int64_t> last, next;
    bool in_config = false;
    std::string problem;  // a cron line kiqd cannot read
};

}  // namespace

int cmd_cron(redis::Connection& conn, const Keys& keys, const Config& config, const Request& r,
             std::ostream& out) {
    const CronStore store(keys);
    const double now = epoch_seconds();
    std::set<std::string> configured;
    for (const auto& s : config.cron) configured.insert(s.name);
    std::vector<Row> rows;
    std::set<std::string> seen;
    auto next_of = [&](Row& row) {
        try {
            row.next = CronExpression::parse_cronish(row.cron).next_time(now);
        } catch (const CronError& e) {
            row.problem = e.what();
        }
    };
    // Both layouts: 1.x's set and every 2.x namespace Redis has or the config names.
    std::set<std::string> namespaces;
    for (const auto& ns : store.discover_namespaces(conn)) namespaces.insert(ns);
    for (const auto& ns : config.cron_namespaces) namespaces.insert(ns);
    std::vector<std::string> sets{""};
    sets.insert(sets.end(), namespaces.begin(), namespaces.end());
    for (const auto& job : store.all(conn, sets)) {
        Row row;
        row.ns = job.ns;
        row.name = job.name();
        row.status = job.enabled() ? "enabled" : "disabled";
        row.cron = job.field("cron");
        row.klass = job.klass();
        row.queue = job.queue();
        row.source = job.source();
        row.last_text = job.field("last_enqueue_time");
        row.last = job.last_enqueue_time();
        row.in_config = configured.count(row.name) > 0;
        next_of(row);
        seen.insert(row.name);
        rows.push_back(std::move(row));
    }
    for (const auto& s : config.cron) {
        if (seen.count(s.name)) continue;
        if (s.one_off()) {
            // sidekiq-scheduler's at: / in:, pushed once by a process's poller (cron_poller.hpp).
            Row row;
            row.name = s.name;
            row.status = "one-off";
            row.cron = s.once_at ? "at " + utc_time(*s.once_at)
                                 : "in " + human_duration(*s.once_in) + " after each start";
            row.klass = s.job_class;
            row.queue = s.queue.empty() ? "default" : s.queue;
            row.source = "schedule";
            row.in_config = true;
            if (s.once_at && *s.once_at > now) row.next = static_cast<std::int64_t>(*s.once_at);
            rows.push_back(std::move(row));
            continue;
        }
        Row row;
        row.name = s.name;
        row.status = "not written yet";  // a kiqd process writes it at its first cron poll
        row.ns = config.cron_layout == CronLayoutSetting::v1 ? ""
                 : !s.ns.empty()                             ? s.ns
                 : config.cron_layout == CronLayoutSetting::v2 || !namespaces.empty()
                     ? config.cron_namespace
                     : "";
        row.cron = s.cron;
        row.klass = s.job_class;
        row.queue = s.queue.empty() ? "default" : s.queue;
        row.source = "schedule";
        row.in_config = true;
        next_of(row);
        rows.push_back(std::move(row));
    }
    // The gem's Web UI order: enabled first, then by name.
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
        return std::make_tuple(a.ns, a.status != "enabled", a.name) <
               std::make_tuple(b.ns, b.status != "enabled", b.name);
    });
    if (r.json) {
        ojson list = ojson::array();
        for (const auto& row : rows) {
            const bool one_off = row.status == "one-off";  // in no sidekiq-cron layout
            ojson j{{"layout", one_off ? ojson(nullptr) : ojson(row.ns.empty() ? "v1" : "v2")},
                    {"namespace", row.ns.empty() ? ojson(nullptr) : ojson(row.ns)},
                    {"name", row.name},
                    {"status", row.status},
                    {"cron", row.cron},
                    {"class", row.klass},
                    {"queue", row.queue},
                    {"source", row.source},
                    {"in_config", row.in_config},
                    {"last_enqueue_time",
                     row.last_text.empty() ? ojson(nullptr) : ojson(row.last_text)},
                    {"last_enqueue_at", row.last ? ojson(*row.last) : ojson(nullptr)},
                    {"next_run_at", row.next ? ojson(*row.next) : ojson(nullptr)},
                    {"next_run",
                     row.next ? ojson(utc_time(static_cast<double>(*row.next))) : ojson(nullptr)}};
            if (!row.problem.empty()) j["error"] = row.problem;
            list.push_back(std::move(j));
        }
        out << json_text(list) << "\n";
        return 0;
    }
    if (rows.empty()) {
        out << "no cron jobs (none in sidekiq-cron's keys, none in the configuration)\n";
        return 0;
    }
    std::vector<std::vector<std::string>> table;
    for (const auto& row : rows) {
        std::string last = "-";
        if (row.last)
            last = utc_time(static_cast<double>(*row.last)) + " (" +
                   human_duration(now - static_cast<double>(*row.last)) + " ago)";
        else if (!row.last_text.empty())
            last = row.last_text;
        std::string next = row.problem.empty() ? "-" : "unreadable cron line: " + row.problem;
        if (row.next)
            next = utc_time(static_cast<double>(*row.next)) + " (in " +
                   human_duration(static_cast<double>(*row.next) - now) + ")";
        table.push_back({row.status == "one-off" ? "-"
                         : row.ns.empty()        ? "- (1.x)"
                                                 : row.ns,
                         row.name, row.status, row.cron, row.klass, row.queue,
                         row.source + (row.in_config ? " (yaml)" : ""), last, next});
    }
    print_table(out,
                {"NAMESPACE", "NAME", "STATUS", "CRON", "CLASS", "QUEUE", "SOURCE", "LAST", "NEXT"},
                table);
    return 0;
}

}  // namespace kiqd::admin
