// `kiqd busy`, `kiqd scheduled`, `kiqd queue` and `kiqd job` (see job_commands.hpp).
#include "admin/job_commands.hpp"

#include <nlohmann/json.hpp>

#include "admin/exit_codes.hpp"
#include "admin/sidekiq_api.hpp"
#include "admin/table.hpp"
#include "common/control_escape.hpp"
#include "job/backtrace_codec.hpp"

namespace kiqd::admin {
namespace {

constexpr size_t kDefaultQueueListing = 100;

// `args` for --json: the array itself when it parses, else its text.
ojson args_json(const std::string& args) {
    if (args.empty()) return nullptr;
    auto v = ojson::parse(args, nullptr, false);
    return v.is_discarded() ? ojson(args) : v;
}

ojson summary_json(const JobSummary& j) {
    ojson o{
        {"jid", j.jid}, {"class", j.job_class}, {"queue", j.queue}, {"args", args_json(j.args)}};
    if (j.enqueued_at) put_time(o, "enqueued_at", *j.enqueued_at);
    return o;
}

// The backtrace of a failed job: Sidekiq 7+ stores it compressed (backtrace_codec.hpp), 6.x as
// an array of lines. nullopt when the job has none, or one that does not decode.
std::optional<std::vector<std::string>> backtrace_of(const nlohmann::json& job) {
    auto it = job.find("error_backtrace");
    if (it == job.end()) return std::nullopt;
    if (it->is_string()) return decode_backtrace(it->get<std::string>());
    if (!it->is_array()) return std::nullopt;
    std::vector<std::string> lines;
    for (const auto& l : *it) lines.push_back(l.is_string() ? l.get<std::string>() : l.dump());
    return lines;
}

}  // namespace

int cmd_busy(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    const double now = epoch_seconds();
    print_listing(
        out, r.json, !r.no_headers, fetch_busy(conn, keys),
        [](const BusyJob& b) {
            ojson o{{"identity", b.identity}, {"thread", b.thread}};
            const ojson job = summary_json(b.job);
            for (auto it = job.begin(); it != job.end(); ++it) o[it.key()] = it.value();
            if (!b.queue.empty()) o["queue"] = b.queue;
            put_time(o, "run_at", b.run_at);
            return o;
        },
        {"PROCESS", "THREAD", "JID", "CLASS", "QUEUE", "ARGS", "STARTED"},
        [&](const BusyJob& b) -> std::vector<std::string> {
            return {b.identity,
                    b.thread,
                    b.job.jid,
                    b.job.job_class,
                    b.queue.empty() ? b.job.queue : b.queue,
                    shorten(b.job.args, 40),
                    time_cell(b.run_at, now)};
        });
    return 0;
}

int cmd_scheduled(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    // --limit 0 lists them all, as for `queue ls`.
    const auto entries = list_entries(conn, keys.schedule(), {}, r.limit.value_or(0));
    const double now = epoch_seconds();
    print_listing(
        out, r.json, !r.no_headers, entries,
        [](const SetEntry& e) {
            ojson o{{"jid", e.jid},
                    {"class", e.job_class},
                    {"queue", e.queue},
                    {"args", args_json(e.args)}};
            put_time(o, "at", e.score);
            return o;
        },
        {"JID", "CLASS", "QUEUE", "RUNS AT", "ARGS"},
        [&](const SetEntry& e) -> std::vector<std::string> {
            return {e.jid, e.job_class, e.queue, time_cell(e.score, now, true),
                    shorten(e.args, 40)};
        });
    return 0;
}

int cmd_queue(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out,
              std::ostream& err, std::istream& in, bool interactive) {
    const std::string& name = r.targets.at(0);
    if (r.action == "ls") {
        const size_t limit = r.limit.value_or(kDefaultQueueListing);
        const auto jobs = list_queue(conn, keys, name, limit);
        const double now = epoch_seconds();
        print_listing(out, r.json, !r.no_headers, jobs, summary_json,
                      {"JID", "CLASS", "ARGS", "ENQUEUED"},
                      [&](const JobSummary& j) -> std::vector<std::string> {
                          return {j.jid, j.job_class, shorten(j.args, 50),
                                  j.enqueued_at ? time_cell(*j.enqueued_at, now) : "-"};
                      });
        if (r.json) return 0;
        const long long size = conn.command({"LLEN", keys.queue(name)}).integer();
        if (!r.no_headers && limit != 0 && size > static_cast<long long>(jobs.size()))
            out << "(the next " << jobs.size() << " of " << size
                << " jobs; --limit N, 0 for all)\n";
        return 0;
    }
    // clear
    if (!r.yes) {
        if (!interactive) {
            err << "kiqd: queue clear: not asking without a terminal: add --yes to clear "
                << escape_control(name) << std::endl;
            return kExitNotFound;
        }
        const long long size = conn.command({"LLEN", keys.queue(name)}).integer();
        err << "Delete all " << size << " jobs of queue " << escape_control(name) << " on Redis "
            << escape_control(r.redis_endpoint) << "? [y/N] " << std::flush;
        std::string answer;
        std::getline(in, answer);
        if (answer != "y" && answer != "Y" && answer != "yes") {
            err << "kiqd: queue clear: not cleared" << std::endl;
            return kExitNotFound;
        }
    }
    const long long deleted = clear_queue(conn, keys, name);
    if (r.json)
        out << json_text({{"queue", name}, {"deleted", deleted}}) << "\n";
    else
        out << "cleared queue " << escape_control(name) << ": " << deleted << " jobs deleted\n";
    return 0;
}

int cmd_job(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    const std::string& jid = r.targets.at(0);
    const auto found = find_job(conn, keys, jid);
    if (found.empty())
        throw NotFound("no job with jid " + jid +
                       " in the queues, scheduled, retries, dead or busy jobs");
    const double now = epoch_seconds();
    ojson all = ojson::array();
    bool first = true;
    for (const auto& f : found) {
        const auto job = nlohmann::json::parse(f.payload, nullptr, false);
        const auto backtrace = job.is_object() ? backtrace_of(job) : std::nullopt;
        if (r.json) {
            ojson o{{"where", f.where}, {"in", f.container}};
            if (f.at) put_time(o, f.where == "busy" ? "run_at" : "at", *f.at);
            auto parsed = ojson::parse(f.payload, nullptr, false);
            o["job"] = parsed.is_discarded() ? ojson(f.payload) : parsed;
            if (backtrace) o["backtrace"] = *backtrace;
            all.push_back(std::move(o));
            continue;
        }
        if (!first) out << "\n";
        first = false;
        std::vector<std::vector<std::string>> rows;
        std::string where = f.where + (f.container == f.where ? "" : " (" + f.container + ")");
        if (f.at) {
            const char* what = f.where == "dead"   ? "died "
                               : f.where == "busy" ? "started "
                                                   : "runs at ";
            where += ", " + std::string(what) +
                     time_cell(*f.at, now, f.where == "retry" || f.where == "scheduled");
        }
        rows.push_back({"where", where});
        if (!job.is_object()) {
            rows.push_back({"payload", shorten(f.payload, 200)});
        } else {
            for (const char* k : {"jid", "class", "wrapped", "queue"})
                if (auto it = job.find(k); it != job.end())
                    rows.push_back({k, it->is_string() ? it->get<std::string>() : it->dump()});
            if (auto it = job.find("args"); it != job.end())
                rows.push_back({"args", shorten(it->dump(-1, ' ', false,
                                                         nlohmann::json::error_handler_t::replace),
                                                500)});
            for (const char* k : {"created_at", "enqueued_at", "failed_at", "retried_at"})
                if (auto it = job.find(k); it != job.end() && it->is_number())
                    rows.push_back(
                        {k, time_cell(timestamp_seconds(it->get<double>(), it->is_number_integer()),
                                      now)});
            for (const char* k : {"retry", "retry_count"})
                if (auto it = job.find(k); it != job.end()) rows.push_back({k, it->dump()});
            if (job.contains("error_class") || job.contains("error_message")) {
                auto field = [&](const char* k) {
                    auto it = job.find(k);
                    return it == job.end() || it->is_null() ? std::string()
                           : it->is_string()                ? it->get<std::string>()
                                                            : it->dump();
                };
                rows.push_back(
                    {"error", shorten(field("error_class") + ": " + field("error_message"), 500)});
            }
        }
        print_table(out, {"FIELD", "VALUE"}, rows, false);
        if (backtrace) {
            out << "backtrace:\n";
            for (const auto& line : *backtrace) out << "  " << escape_control(line) << "\n";
        } else if (job.is_object() && job.contains("error_backtrace")) {
            out << "backtrace: (error_backtrace is not in a form kiqd decodes; see --json)\n";
        }
    }
    if (r.json) out << json_text({{"jid", jid}, {"found", all}}) << "\n";
    return 0;
}

}  // namespace kiqd::admin
