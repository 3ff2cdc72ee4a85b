// The data side of the admin command line, as Sidekiq's api.rb (see sidekiq_api.hpp): reads into
// plain structs and single actions on a redis::Connection; nothing here prints.
#include "admin/sidekiq_api.hpp"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "job/raw_json_object.hpp"
#include "kiqd/redis/script.hpp"
#include "middleware/pause/pause_control.hpp"
#include "server/scheduler.hpp"

namespace kiqd::admin {
namespace {

using nlohmann::json;

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

RetryResult retry_entries(redis::Connection& conn, const Keys& keys, const std::string& set_key,
                          const std::vector<SetEntry>& entries, Compat compat) {
    // The scheduler's move: the push happens only if this call removed the member.
    //
    // KEYS[1] -> set_key: the retry or dead ZSET the entry is in
    // KEYS[2] -> the `queues` set (so the queue shows up in Sidekiq's Web UI and `kiqd queues`)
    // KEYS[3] -> the destination list, queue:<queue>
    // ARGV[1] -> the entry's exact member string, to ZREM
    // ARGV[2] -> the queue name, to SADD
    // ARGV[3] -> the payload to LPUSH: the member with retry_count − 1 and a fresh enqueued_at
    //
    // Returns 1 when this call removed the member and pushed the payload, 0 when the member was
    // already gone (the scheduler or another admin moved it first; nothing is pushed), and a
    // WRONGTYPE error with nothing written when KEYS[2] or KEYS[3] holds another type.
    static const redis::Script script(kMoveToQueueScript);
    RetryResult result;
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
        try {
            auto reply = script.run(conn, {set_key, keys.queues(), keys.queue(queue)},
                                    {e.member, queue, obj->dump()});
            if (reply.is_integer() && reply.integer() == 1) ++result.moved;
        } catch (const redis::ReplyError& refusal) {
            if (!refusal.starts_with("WRONGTYPE")) throw;
            if (result.refused++ == 0) result.refusal = refusal.what();
        }
    }
    return result;
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

}  // namespace kiqd::admin
