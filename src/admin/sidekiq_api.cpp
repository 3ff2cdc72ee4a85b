#include "admin/admin.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "job/raw_json_object.hpp"
#include "kiqd/client.hpp"
#include "kiqd/clock.hpp"
#include "kiqd/redis/script.hpp"
#include "middleware/pause/pause_control.hpp"
#include "server/scheduler.hpp"

namespace kiqd::admin {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;  // output keeps the order fields are listed in

constexpr long long kPage = 1000;  // ZRANGE / SSCAN page size

long long to_ll(const std::optional<std::string>& s) {
    if (!s) return 0;
    try {
        return std::stoll(*s);
    } catch (...) {
        return 0;
    }
}

double to_double(const std::optional<std::string>& s) {
    if (!s) return 0.0;
    try {
        return std::stod(*s);
    } catch (...) {
        return 0.0;
    }
}

// Seconds since a payload's enqueued_at (float seconds, or integer ms from Sidekiq 8), as
// Queue#latency: 0 when the job has none or is not JSON.
double latency_of(std::string_view payload, double now) {
    auto job = json::parse(payload, nullptr, false);
    if (!job.is_object()) return 0.0;
    auto it = job.find("enqueued_at");
    if (it == job.end() || !it->is_number()) return 0.0;
    return now - timestamp_seconds(it->get<double>(), it->is_number_integer());
}

std::string string_field(const json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return "";
    return it->is_string() ? it->get<std::string>() : it->dump();
}

std::vector<std::string> string_list(const json& j, const char* key) {
    std::vector<std::string> out;
    auto it = j.find(key);
    if (it == j.end() || !it->is_array()) return out;
    for (const auto& v : *it) out.push_back(v.is_string() ? v.get<std::string>() : v.dump());
    return out;
}

SetEntry to_entry(std::string member, double score) {
    SetEntry e;
    e.score = score;
    e.member = std::move(member);
    auto job = json::parse(e.member, nullptr, false);
    if (!job.is_object()) {
        e.job_class = "(not JSON)";
        return e;
    }
    e.jid = string_field(job, "jid");
    // Display class as Sidekiq's: the ActiveJob wrapper's `wrapped` when present.
    e.job_class = string_field(job, "wrapped");
    if (e.job_class.empty()) e.job_class = string_field(job, "class");
    e.queue = string_field(job, "queue");
    e.error_class = string_field(job, "error_class");
    e.error_message = string_field(job, "error_message");
    if (auto it = job.find("retry_count"); it != job.end() && it->is_number_integer())
        e.retry_count = it->get<long long>();
    return e;
}

bool matches(const SetEntry& e, const EntryFilter& f) {
    if (!f.jids.empty() && std::find(f.jids.begin(), f.jids.end(), e.jid) == f.jids.end())
        return false;
    if (!f.job_class.empty()) {
        auto job = json::parse(e.member, nullptr, false);
        if (!job.is_object()) return false;
        if (string_field(job, "class") != f.job_class &&
            string_field(job, "wrapped") != f.job_class)
            return false;
    }
    return true;
}

// ---- output ---------------------------------------------------------------------------------

// A plain text table: a header row and left-aligned columns two spaces apart.
void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows) {
    std::vector<size_t> width(header.size());
    for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
    for (const auto& r : rows)
        for (size_t i = 0; i < r.size() && i < width.size(); ++i)
            width[i] = std::max(width[i], r[i].size());
    auto line = [&](const std::vector<std::string>& cells) {
        std::string s;
        for (size_t i = 0; i < cells.size(); ++i) {
            s += cells[i];
            if (i + 1 < cells.size()) s += std::string(width[i] - cells[i].size() + 2, ' ');
        }
        out << s << "\n";
    };
    line(header);
    for (const auto& r : rows) line(r);
}

std::string fixed(double v, int decimals) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(decimals) << v;
    return s.str();
}

// "4.2 s", "3 min", "2.5 h", "3.1 d": how long ago or how long, for humans.
std::string human_duration(double seconds) {
    const double a = std::fabs(seconds);
    std::string s;
    if (a < 60)
        s = fixed(a, a < 10 ? 2 : 1) + " s";
    else if (a < 3600)
        s = fixed(a / 60, 1) + " min";
    else if (a < 86400)
        s = fixed(a / 3600, 1) + " h";
    else
        s = fixed(a / 86400, 1) + " d";
    return seconds < 0 ? "-" + s : s;
}

std::string utc_time(double epoch) {
    const std::time_t t = static_cast<std::time_t>(epoch);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
    return s;
}

std::string shorten(std::string s, size_t max) {
    for (auto& c : s)
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (s.size() > max) s = s.substr(0, max - 3) + "...";
    return s;
}

ojson entry_json(const SetEntry& e) {
    ojson j = {{"jid", e.jid},
               {"class", e.job_class},
               {"queue", e.queue},
               {"score", e.score},
               {"at", utc_time(e.score)},
               {"error_class", e.error_class},
               {"error_message", e.error_message}};
    j["retry_count"] = e.retry_count ? ojson(*e.retry_count) : ojson(nullptr);
    return j;
}

// ---- commands -------------------------------------------------------------------------------

class NotFound : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

int cmd_stats(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    const Stats s = fetch_stats(conn, keys);
    if (r.json) {
        out << ojson{{"processed", s.processed},
                     {"failed", s.failed},
                     {"busy", s.busy},
                     {"enqueued", s.enqueued},
                     {"scheduled", s.scheduled},
                     {"retries", s.retries},
                     {"dead", s.dead},
                     {"processes", s.processes},
                     {"default_queue_latency", s.default_queue_latency}}
                   .dump()
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
                 {"default queue latency", fixed(s.default_queue_latency, 2) + " s"}});
    return 0;
}

int cmd_queues(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    const auto queues = fetch_queues(conn, keys);
    if (r.json) {
        ojson a = ojson::array();
        for (const auto& q : queues)
            a.push_back({{"name", q.name}, {"size", q.size}, {"latency", q.latency}});
        out << a.dump() << "\n";
        return 0;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& q : queues)
        rows.push_back({q.name, std::to_string(q.size), fixed(q.latency, 2) + " s"});
    print_table(out, {"QUEUE", "SIZE", "LATENCY"}, rows);
    return 0;
}

int cmd_processes(redis::Connection& conn, const Keys& keys, const Request& r, std::ostream& out) {
    const auto procs = fetch_processes(conn, keys);
    const double now = epoch_seconds();
    if (r.json) {
        ojson a = ojson::array();
        for (const auto& p : procs)
            a.push_back({{"identity", p.identity},
                         {"hostname", p.hostname},
                         {"pid", p.pid},
                         {"tag", p.tag},
                         {"labels", p.labels},
                         {"queues", p.queues},
                         {"concurrency", p.concurrency},
                         {"busy", p.busy},
                         {"rss_kb", p.rss_kb},
                         {"beat", p.beat},
                         {"started_at", p.started_at},
                         {"quiet", p.quiet}});
        out << a.dump() << "\n";
        return 0;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& p : procs)
        rows.push_back({p.identity, p.tag,
                        std::to_string(p.busy) + "/" + std::to_string(p.concurrency),
                        fixed(p.rss_kb / 1024.0, 1) + " MB", human_duration(now - p.beat) + " ago",
                        p.quiet ? "yes" : "no", join(p.queues, ",")});
    print_table(out, {"IDENTITY", "TAG", "BUSY", "RSS", "LAST BEAT", "QUIET", "QUEUES"}, rows);
    return 0;
}

int cmd_set(redis::Connection& conn, const Keys& keys, const Config& config, const Request& r,
            std::ostream& out, std::ostream& err) {
    const bool dead = r.command == "dead";
    const std::string set_key = dead ? keys.dead() : keys.retry();
    EntryFilter filter{r.targets, r.job_class};
    const std::string action = r.action.empty() ? "list" : r.action;
    if (action == "list") {
        auto entries = list_entries(conn, set_key, filter);
        if (dead) std::reverse(entries.begin(), entries.end());  // the newest death first
        if (r.limit && entries.size() > *r.limit) entries.resize(*r.limit);
        if (r.json) {
            ojson a = ojson::array();
            for (const auto& e : entries) a.push_back(entry_json(e));
            out << a.dump() << "\n";
            return 0;
        }
        const double now = epoch_seconds();
        std::vector<std::vector<std::string>> rows;
        for (const auto& e : entries) {
            const std::string when = dead ? human_duration(now - e.score) + " ago"
                                          : "in " + human_duration(e.score - now);
            rows.push_back({e.jid, e.job_class, e.queue,
                            e.retry_count ? std::to_string(*e.retry_count) : "-", when,
                            shorten(e.error_class + ": " + e.error_message, 60)});
        }
        print_table(
            out, {"JID", "CLASS", "QUEUE", "RETRIES", dead ? "DIED" : "NEXT RETRY", "ERROR"}, rows);
        return 0;
    }
    if (action != "retry" && action != "delete") {
        err << "kiqd: " << r.command << ": unknown action '" << action
            << "' (expected list, retry or delete)" << std::endl;
        return kExitNotFound;
    }
    if (filter.jids.empty() && filter.job_class.empty() && !r.all) {
        err << "kiqd: " << r.command << " " << action
            << ": name the entries: JID..., --class CLASS, or --all" << std::endl;
        return kExitNotFound;
    }
    const auto entries = list_entries(conn, set_key, filter);
    for (const auto& jid : filter.jids) {
        const bool found = std::any_of(entries.begin(), entries.end(),
                                       [&](const SetEntry& e) { return e.jid == jid; });
        if (!found) throw NotFound("no entry with jid " + jid + " in the " + set_key + " set");
    }
    const size_t done = action == "retry"
                            ? retry_entries(conn, keys, set_key, entries, config.compat)
                            : delete_entries(conn, set_key, entries);
    if (r.json) {
        out << ojson{{"action", action},
                     {"set", set_key},
                     {"matched", entries.size()},
                     {action == "retry" ? "retried" : "deleted", done}}
                   .dump()
            << "\n";
    } else {
        out << (action == "retry" ? "retried " : "deleted ") << done << " of " << entries.size()
            << " matching " << (dead ? "dead" : "retry") << " entr"
            << (entries.size() == 1 ? "y" : "ies");
        if (done < entries.size()) out << " (the others were moved or removed meanwhile)";
        out << "\n";
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
        out << ojson{{"signal", signal}, {"identities", ids}}.dump() << "\n";
    } else {
        for (const auto& id : ids) out << r.command << ": sent " << signal << " to " << id << "\n";
        if (ids.empty()) out << r.command << ": no live processes\n";
    }
    return 0;
}

}  // namespace

Stats fetch_stats(redis::Connection& conn, const Keys& keys) {
    auto r = conn.pipeline({{"GET", keys.stat("processed")},
                            {"GET", keys.stat("failed")},
                            {"ZCARD", keys.schedule()},
                            {"ZCARD", keys.retry()},
                            {"ZCARD", keys.dead()},
                            {"SCARD", keys.processes()},
                            {"LRANGE", keys.queue("default"), "-1", "-1"}});
    Stats s;
    s.processed = to_ll(r[0].optional_str());
    s.failed = to_ll(r[1].optional_str());
    s.scheduled = r[2].integer();
    s.retries = r[3].integer();
    s.dead = r[4].integer();
    s.processes = r[5].integer();
    if (r[6].size() == 1) s.default_queue_latency = latency_of(r[6][0].str(), epoch_seconds());
    for (const auto& q : fetch_queues(conn, keys)) s.enqueued += q.size;
    for (const auto& p : fetch_processes(conn, keys)) s.busy += p.busy;
    return s;
}

std::vector<QueueInfo> fetch_queues(redis::Connection& conn, const Keys& keys) {
    auto members = conn.command({"SMEMBERS", keys.queues()});
    std::vector<std::string> names;
    for (size_t i = 0; i < members.size(); ++i) names.emplace_back(members[i].str());
    std::sort(names.begin(), names.end());
    std::vector<redis::Command> cmds;
    for (const auto& n : names) {
        cmds.push_back({"LLEN", keys.queue(n)});
        cmds.push_back({"LRANGE", keys.queue(n), "-1", "-1"});
    }
    std::vector<QueueInfo> out;
    if (cmds.empty()) return out;
    auto replies = conn.pipeline(cmds);
    const double now = epoch_seconds();
    for (size_t i = 0; i < names.size(); ++i) {
        QueueInfo q{names[i], replies[2 * i].integer(), 0.0};
        const auto& last = replies[2 * i + 1];
        if (last.size() == 1) q.latency = latency_of(last[0].str(), now);
        out.push_back(std::move(q));
    }
    return out;
}

std::vector<ProcessInfo> fetch_processes(redis::Connection& conn, const Keys& keys) {
    std::vector<std::string> ids;
    std::string cursor = "0";
    do {  // SSCAN, as ProcessSet does: `processes` may be large on a big cluster
        auto page =
            conn.command({"SSCAN", keys.processes(), cursor, "COUNT", std::to_string(kPage)});
        cursor = std::string(page[0].str());
        for (size_t i = 0; i < page[1].size(); ++i) ids.emplace_back(page[1][i].str());
    } while (cursor != "0");
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::vector<ProcessInfo> out;
    if (ids.empty()) return out;
    std::vector<redis::Command> cmds;
    for (const auto& id : ids)
        cmds.push_back({"HMGET", keys.process(id), "info", "busy", "beat", "quiet", "rss"});
    auto replies = conn.pipeline(cmds);
    for (size_t i = 0; i < ids.size(); ++i) {
        const auto& h = replies[i];
        auto info_text = h[0].optional_str();
        if (!info_text) continue;  // expired: a dead process not yet pruned
        auto info = json::parse(*info_text, nullptr, false);
        if (!info.is_object()) continue;
        ProcessInfo p;
        p.identity = ids[i];
        p.hostname = string_field(info, "hostname");
        p.tag = string_field(info, "tag");
        if (auto it = info.find("pid"); it != info.end() && it->is_number_integer())
            p.pid = it->get<long long>();
        if (auto it = info.find("concurrency"); it != info.end() && it->is_number_integer())
            p.concurrency = it->get<long long>();
        if (auto it = info.find("started_at"); it != info.end() && it->is_number())
            p.started_at = it->get<double>();
        p.queues = string_list(info, "queues");
        p.labels = string_list(info, "labels");
        p.busy = to_ll(h[1].optional_str());
        p.beat = to_double(h[2].optional_str());
        p.quiet = h[3].optional_str() == "true";
        p.rss_kb = to_ll(h[4].optional_str());
        out.push_back(std::move(p));
    }
    return out;
}

std::vector<SetEntry> list_entries(redis::Connection& conn, const std::string& set_key,
                                   const EntryFilter& filter) {
    std::vector<SetEntry> out;
    for (long long start = 0;; start += kPage) {
        auto page = conn.command({"ZRANGE", set_key, std::to_string(start),
                                  std::to_string(start + kPage - 1), "WITHSCORES"});
        const size_t n = page.size() / 2;
        for (size_t i = 0; i < n; ++i) {
            SetEntry e = to_entry(std::string(page[2 * i].str()),
                                  std::stod(std::string(page[2 * i + 1].str())));
            if (matches(e, filter)) out.push_back(std::move(e));
        }
        if (n < static_cast<size_t>(kPage)) break;
    }
    return out;
}

size_t retry_entries(redis::Connection& conn, const Keys& keys, const std::string& set_key,
                     const std::vector<SetEntry>& entries, Compat compat) {
    // The scheduler's move: the push happens only if this call removed the member.
    static const redis::Script script(kMoveToQueueScript);
    size_t moved = 0;
    for (const auto& e : entries) {
        auto obj = RawJsonObject::parse(e.member);
        if (!obj) continue;  // not JSON: Sidekiq's retry would raise too; leave it in the set
        // Sidekiq::Client.push of the parsed job: retry_count − 1 (so the next failure counts
        // it again), queue defaulting to "default", a fresh enqueued_at; every other member is
        // copied byte for byte.
        if (auto* rc = obj->find("retry_count")) {
            auto v = json::parse(*rc, nullptr, false);
            if (v.is_number_integer())
                obj->set("retry_count", std::to_string(v.get<long long>() - 1));
        }
        std::string queue = "default";
        if (auto* q = obj->find("queue")) {
            auto v = json::parse(*q, nullptr, false);
            if (v.is_string()) queue = v.get<std::string>();
        }
        obj->set("enqueued_at", payload_timestamp(compat, epoch_seconds()));
        auto reply = script.run(conn, {set_key, keys.queues(), keys.queue(queue)},
                                {e.member, queue, obj->dump()});
        if (reply.is_integer() && reply.integer() == 1) ++moved;
    }
    return moved;
}

size_t delete_entries(redis::Connection& conn, const std::string& set_key,
                      const std::vector<SetEntry>& entries) {
    size_t removed = 0;
    for (const auto& e : entries) removed += conn.command({"ZREM", set_key, e.member}).integer();
    return removed;
}

void send_signal(redis::Connection& conn, const Keys& keys, const std::string& identity,
                 const std::string& signal) {
    const std::string key = keys.signals(identity);
    conn.pipeline({{"MULTI"}, {"LPUSH", key, signal}, {"EXPIRE", key, "60"}, {"EXEC"}});
}

PausedReport fetch_paused(redis::Connection& conn, const Keys& keys) {
    PausedReport report;
    auto replies = conn.pipeline({{"SMEMBERS", keys.paused_queues()},
                                  {"SMEMBERS", keys.paused_workers()},
                                  {"HGETALL", keys.parked_classes()}});
    std::set<std::string> queues;
    for (size_t i = 0; i < replies[0].size(); ++i) queues.emplace(replies[0][i].str());
    std::map<std::string, PausedReport::Worker> workers;
    for (size_t i = 0; i < replies[1].size(); ++i) {
        auto& w = workers[std::string(replies[1][i].str())];
        w.paused = true;
    }
    for (size_t i = 0; i + 1 < replies[2].size(); i += 2)
        workers[std::string(replies[2][i].str())].strategy = replies[2][i + 1].str();
    std::vector<redis::Command> counts;
    for (const auto& q : queues) counts.push_back({"LLEN", keys.queue(q)});
    for (const auto& [c, w] : workers)
        counts.push_back({"ZCARD", keys.parked_jobs(pause_control_worker_name(c))});
    auto sizes = counts.empty() ? std::vector<redis::Reply>{} : conn.pipeline(counts);
    size_t i = 0;
    for (const auto& q : queues) report.queues.push_back({q, sizes[i++].integer()});
    for (auto& [c, w] : workers) {
        w.job_class = c;
        w.parked = sizes[i++].integer();
        report.workers.push_back(std::move(w));
    }
    return report;
}

bool set_paused(redis::Connection& conn, const Keys& keys, const std::string& kind,
                const std::string& name, bool paused) {
    const std::string set = kind == "queue" ? keys.paused_queues() : keys.paused_workers();
    return conn.command({paused ? "SADD" : "SREM", set, name}).integer() == 1;
}

namespace {

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
        out << ojson{{"kind", r.action}, {"name", name}, {"paused", pause}, {"changed", changed}}
                   .dump()
            << "\n";
        return 0;
    }
    out << r.action << " " << name << (changed ? " is now " : " was already ")
        << (pause ? "paused" : "resumed");
    if (changed && pause && r.action == "worker")
        out << ": kiqd processes park its jobs within " << refresh.count() << " s";
    else if (changed && pause)
        out << ": kiqd processes stop fetching from it within " << refresh.count() << " s";
    else if (changed && r.action == "worker")
        out << ": its parked jobs (" << pause_control_worker_name(name) << ") go back to their "
            << "queues at the next resume round";
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
        out << ojson{{"queues", queues}, {"workers", workers}}.dump() << "\n";
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
    print_table(out, {"KIND", "NAME", "STATE", "JOBS"}, rows);
    return 0;
}

}  // namespace

int run_admin(const Request& r, const Config& config, std::ostream& out, std::ostream& err) {
    const Keys keys(config.redis.key_prefix);
    redis::ConnectionOptions options{config.redis.endpoint, config.redis.connect_timeout,
                                     std::chrono::milliseconds(5000), "", config.redis.sentinel};
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
        err << "kiqd: unknown admin command " << r.command << std::endl;
        return kExitNotFound;
    } catch (const NotFound& e) {
        err << "kiqd: " << r.command << ": " << e.what() << std::endl;
        return kExitNotFound;
    } catch (const redis::Error& e) {
        // Connection errors name the server already; reply errors (WRONGTYPE, NOAUTH, ...) not.
        std::string what = e.what();
        const std::string where = options.describe();
        if (what.find(where) == std::string::npos) what += " (Redis " + where + ")";
        err << "kiqd: " << r.command << ": " << what << std::endl;
        return kExitUnavailable;
    }
}

std::optional<double> parse_enqueue_time(const std::string& text, double now) {
    if (text.empty()) return std::nullopt;
    auto number = [](const std::string& t, double& v) {
        if (t.empty() || !(std::isdigit(static_cast<unsigned char>(t[0])) || t[0] == '.'))
            return false;
        size_t used = 0;
        try {
            v = std::stod(t, &used);
        } catch (const std::exception&) {
            return false;
        }
        return used == t.size() && std::isfinite(v);
    };
    double v = 0;
    if (text[0] == '+') {  // relative: +30, +30s, +5m, +2h, +1d
        std::string n = text.substr(1);
        double unit = 1;
        if (!n.empty() && std::string("smhd").find(n.back()) != std::string::npos) {
            unit = n.back() == 's' ? 1 : n.back() == 'm' ? 60 : n.back() == 'h' ? 3600 : 86400;
            n.pop_back();
        }
        if (!number(n, v) || v * unit > 1e10) return std::nullopt;
        return now + v * unit;
    }
    if (number(text, v)) return v > 1e11 ? std::nullopt : std::optional<double>(v);
    // ISO 8601
    int y, mo, d, h, mi, sec, used = 0;
    if (std::sscanf(text.c_str(), "%4d-%2d-%2d%*1[T ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec,
                    &used) != 6 ||
        used < 19)
        return std::nullopt;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return std::nullopt;
    std::string rest = text.substr(static_cast<size_t>(used));
    double frac = 0;
    if (!rest.empty() && rest[0] == '.') {
        size_t n = 1;
        while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
        if (n == 1) return std::nullopt;
        frac = std::stod("0" + rest.substr(0, n));
        rest = rest.substr(n);
    }
    long offset = 0;
    if (rest == "Z" || rest.empty()) {
        offset = 0;
    } else if ((rest[0] == '+' || rest[0] == '-') && rest.size() == 6 && rest[3] == ':') {
        int oh = 0, om = 0;
        if (std::sscanf(rest.c_str() + 1, "%2d:%2d", &oh, &om) != 2 || oh > 23 || om > 59)
            return std::nullopt;
        offset = (rest[0] == '+' ? 1 : -1) * (oh * 3600L + om * 60L);
    } else {
        return std::nullopt;
    }
    std::tm tm{};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    return static_cast<double>(timegm(&tm) - offset) + frac;
}

int run_enqueue(const EnqueueRequest& r, const Config& config, std::ostream& out,
                std::ostream& err) {
    nlohmann::ordered_json job{{"class", r.job_class}, {"args", nlohmann::ordered_json::array()}};
    if (r.job_class.empty()) {
        err << "kiqd enqueue: CLASS must not be empty" << std::endl;
        return kExitBadInput;
    }
    for (size_t i = 0; i < r.args_json.size(); ++i) {
        try {
            job["args"].push_back(nlohmann::ordered_json::parse(r.args_json[i]));
        } catch (const nlohmann::json::parse_error& e) {
            std::string what = e.what();
            if (auto p = what.find("parse error"); p != std::string::npos) what = what.substr(p);
            err << "kiqd enqueue: ARG_JSON " << i + 1 << " (" << r.args_json[i]
                << ") is not valid JSON: " << what
                << " (a string needs JSON quotes, e.g. '\"text\"')" << std::endl;
            return kExitBadInput;
        }
    }
    if (r.queue) {
        if (r.queue->empty()) {
            err << "kiqd enqueue: --queue must not be empty" << std::endl;
            return kExitBadInput;
        }
        job["queue"] = *r.queue;
    }
    if (r.at) {
        auto when = parse_enqueue_time(*r.at, epoch_seconds());
        if (!when) {
            err << "kiqd enqueue: --at '" << *r.at
                << "' is not a time (epoch seconds, +N[s|m|h|d], or ISO 8601 like "
                   "2026-11-22T15:00:00Z)"
                << std::endl;
            return kExitBadInput;
        }
        job["at"] = *when;
    }
    if (r.tenant) job["fair_tenant"] = *r.tenant;
    const Client client = make_process_client(config);
    redis::ConnectionOptions options{config.redis.endpoint, config.redis.connect_timeout,
                                     std::chrono::milliseconds(5000), "", config.redis.sentinel};
    try {
        redis::Connection conn(options);
        conn.connect();
        const std::string jid = client.push(conn, std::move(job));
        if (jid.empty()) {
            err << "kiqd enqueue: a client middleware stopped the push" << std::endl;
            return kExitNotFound;
        }
        out << jid << std::endl;
        return 0;
    } catch (const std::invalid_argument& e) {
        err << "kiqd enqueue: " << e.what() << std::endl;
        return kExitBadInput;
    } catch (const redis::Error& e) {
        std::string what = e.what();
        const std::string where = options.describe();
        if (what.find(where) == std::string::npos) what += " (Redis " + where + ")";
        err << "kiqd enqueue: " << what << std::endl;
        return kExitUnavailable;
    }
}

}  // namespace kiqd::admin
