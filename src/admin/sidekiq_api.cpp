// The data side of the admin command line, as Sidekiq's api.rb (see sidekiq_api.hpp): reads into
// plain structs and single actions on a redis::Connection; nothing here prints.
#include "admin/sidekiq_api.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>

#include "admin/table.hpp"
#include "job/dead_set.hpp"
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

// The fields a listing shows, as Sidekiq's display_class: the ActiveJob wrapper's `wrapped`
// when present. Into a SetEntry or a JobSummary; false (and "(not JSON)") when `payload` is not
// a JSON object, `job` holding the parsed payload otherwise.
template <class Listed>
bool read_listed(std::string_view payload, Listed& out, json& job) {
    job = json::parse(payload, nullptr, false);
    if (!job.is_object()) {
        out.job_class = "(not JSON)";
        return false;
    }
    out.jid = string_field(job, "jid");
    out.job_class = string_field(job, "wrapped");
    if (out.job_class.empty()) out.job_class = string_field(job, "class");
    out.queue = string_field(job, "queue");
    if (auto it = job.find("args"); it != job.end()) out.args = it->dump();
    return true;
}

SetEntry to_entry(std::string member, double score) {
    SetEntry e;
    e.score = score;
    e.member = std::move(member);
    json job;
    if (!read_listed(e.member, e, job)) return e;
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
    return fetch_stats(conn, keys, fetch_queues(conn, keys), fetch_processes(conn, keys));
}

Stats fetch_stats(redis::Connection& conn, const Keys& keys, const std::vector<QueueInfo>& queues,
                  const std::vector<ProcessInfo>& processes) {
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
    for (const auto& q : queues) s.enqueued += q.size;
    for (const auto& p : processes) s.busy += p.busy;
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
        cmds.push_back({"HMGET", keys.process(id), "info", "busy", "beat", "quiet", "rss",
                        "kiqd_runners", "kiqd_capsules"});
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
        if (auto runners = h[5].optional_str()) p.runners = std::string(*runners);
        if (auto caps = h[6].optional_str()) {
            // Any other shape is ignored: the field is kiqd's own, but Redis is anyone's.
            auto o = nlohmann::ordered_json::parse(*caps, nullptr, false);
            if (o.is_object())
                for (const auto& [name, c] : o.items())
                    if (c.is_object())
                        p.capsules.push_back(
                            {name, c.value("busy", 0LL), c.value("concurrency", 0LL)});
        }
        out.push_back(std::move(p));
    }
    return out;
}

std::string capsules_text(const ProcessInfo& p) {
    std::string out;
    for (const auto& c : p.capsules)
        out += (out.empty() ? "" : ", ") + c.name + " " + std::to_string(c.busy) + "/" +
               std::to_string(c.concurrency);
    return out;
}

void add_capsules_column(const std::vector<ProcessInfo>& processes, size_t at,
                         std::vector<std::string>& headers,
                         std::vector<std::vector<std::string>>& rows) {
    if (std::none_of(processes.begin(), processes.end(),
                     [](const ProcessInfo& p) { return !p.capsules.empty(); }))
        return;
    headers.insert(headers.begin() + static_cast<std::ptrdiff_t>(at), "CAPSULES");
    for (size_t i = 0; i < processes.size(); ++i)
        rows[i].insert(rows[i].begin() + static_cast<std::ptrdiff_t>(at),
                       capsules_text(processes[i]));
}

std::vector<SetEntry> list_entries(redis::Connection& conn, const std::string& set_key,
                                   const EntryFilter& filter, size_t limit) {
    std::vector<SetEntry> out;
    for (long long start = 0; limit == 0 || out.size() < limit; start += kPage) {
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
    if (limit != 0 && out.size() > limit) out.resize(limit);
    return out;
}

namespace {

// Sidekiq::Client.push of the parsed job, as SortedEntry#retry: retry_count − 1 (so the next
// failure counts it again), queue defaulting to "default", a fresh enqueued_at; every other
// member is copied byte for byte. nullopt for a member that is not a JSON object.
std::optional<std::pair<std::string, std::string>> retry_payload(const std::string& member,
                                                                 Compat compat) {
    auto obj = RawJsonObject::parse(member);
    if (!obj) return std::nullopt;
    if (auto* rc = obj->find("retry_count")) {
        auto v = json::parse(*rc, nullptr, false);
        if (v.is_number_integer()) obj->set("retry_count", std::to_string(v.get<long long>() - 1));
    }
    std::string queue = "default";
    if (auto* q = obj->find("queue")) {
        auto v = json::parse(*q, nullptr, false);
        if (v.is_string()) queue = v.get<std::string>();
    }
    obj->set("enqueued_at", payload_timestamp(compat, epoch_seconds()));
    return std::make_pair(queue, obj->dump());
}

void refuse(BulkResult& result, std::string why) {
    if (result.refused++ == 0) result.refusal = std::move(why);
}

}  // namespace

void act_on_entries(redis::Connection& conn, const SetActionContext& ctx,
                    const std::vector<SetEntry>& entries, BulkResult& result) {
    // KEYS/ARGV of both scripts: scheduler.cpp.
    static const redis::Script move(kMoveToQueueScript), kill(kMoveToDeadScript);
    const redis::Script& script = ctx.action == SetAction::kill ? kill : move;
    const double now = epoch_seconds();
    constexpr size_t kBatch = 1000;
    for (size_t start = 0; start < entries.size(); start += kBatch) {
        const size_t end = std::min(entries.size(), start + kBatch);
        std::vector<redis::Command> commands;
        std::vector<const SetEntry*> sent;
        for (size_t i = start; i < end; ++i) {
            const SetEntry& e = entries[i];
            ++result.matched;
            if (ctx.action == SetAction::remove) {
                commands.push_back({"ZREM", ctx.set_key, e.member});
            } else if (ctx.action == SetAction::kill) {
                commands.push_back(script.evalsha_command({ctx.set_key, ctx.keys.dead()},
                                                          {e.member, score_text(now), e.member}));
            } else if (auto p = retry_payload(e.member, ctx.compat)) {
                commands.push_back(script.evalsha_command(
                    {ctx.set_key, ctx.keys.queues(), ctx.keys.queue(p->first)},
                    {e.member, p->first, p->second}));
            } else {
                refuse(result, "entry " + shorten(e.member, 40) + " is not a JSON object");
                continue;
            }
            sent.push_back(&e);
        }
        if (commands.empty()) continue;
        // The script's NOSCRIPT replies (a flushed cache) are resent by the script itself.
        auto replies = ctx.action == SetAction::remove
                           ? conn.pipeline_unchecked(commands)
                           : script.pipeline_unchecked(conn, std::move(commands));
        for (size_t i = 0; i < replies.size(); ++i) {
            const auto& reply = replies[i];
            if (reply.is_error()) {
                if (reply.error_text().rfind("WRONGTYPE", 0) != 0)
                    throw redis::ReplyError(std::string(reply.error_text()));
                result.redis_refused = true;
                refuse(result, std::string(reply.error_text()));
            } else {
                (reply.integer() == 1 ? result.done : result.skipped)++;
            }
        }
        if (ctx.action == SetAction::kill) {
            const DeadSet dead(ctx.keys, ctx.dead_max_jobs, ctx.dead_timeout_seconds, ctx.compat);
            for (const auto& r : conn.pipeline(dead.trim_commands(now)))
                result.trimmed += r.integer();
        }
    }
}

BulkResult act_on_matching(redis::Connection& conn, const SetActionContext& ctx,
                           const EntryFilter& filter,
                           const std::function<void(const BulkResult&)>& progress) {
    BulkResult result;
    std::unordered_set<std::string> seen;  // ZSCAN may return a member twice
    std::string cursor = "0";
    do {
        auto page = conn.command({"ZSCAN", ctx.set_key, cursor, "COUNT", std::to_string(kPage)});
        cursor = std::string(page[0].str());
        std::vector<SetEntry> batch;
        for (size_t i = 0; i + 1 < page[1].size(); i += 2) {
            std::string member(page[1][i].str());
            if (!seen.insert(member).second) continue;
            SetEntry e = to_entry(std::move(member), std::stod(std::string(page[1][i + 1].str())));
            if (matches(e, filter)) batch.push_back(std::move(e));
        }
        act_on_entries(conn, ctx, batch, result);
        if (progress) progress(result);
    } while (cursor != "0");
    return result;
}

JobSummary summarize_job(std::string payload) {
    JobSummary j;
    j.payload = std::move(payload);
    json job;
    if (!read_listed(j.payload, j, job)) return j;
    if (auto it = job.find("enqueued_at"); it != job.end() && it->is_number())
        j.enqueued_at = timestamp_seconds(it->get<double>(), it->is_number_integer());
    return j;
}

std::vector<BusyJob> fetch_busy(redis::Connection& conn, const Keys& keys) {
    return fetch_busy(conn, keys, fetch_processes(conn, keys));
}

std::vector<BusyJob> fetch_busy(redis::Connection& conn, const Keys& keys,
                                const std::vector<ProcessInfo>& procs) {
    std::vector<BusyJob> out;
    if (procs.empty()) return out;
    std::vector<redis::Command> cmds;
    for (const auto& p : procs) {
        cmds.push_back({"HGETALL", keys.work(p.identity, Compat::v7)});
        cmds.push_back({"HGETALL", keys.work(p.identity, Compat::v6)});
    }
    auto replies = conn.pipeline(cmds);
    for (size_t i = 0; i < procs.size(); ++i) {
        std::set<std::string> threads;
        for (const auto& h : {std::cref(replies[2 * i]), std::cref(replies[2 * i + 1])}) {
            for (size_t k = 0; k + 1 < h.get().size(); k += 2) {
                std::string thread(h.get()[k].str());
                if (!threads.insert(thread).second) continue;
                BusyJob b;
                b.identity = procs[i].identity;
                b.thread = std::move(thread);
                auto value = json::parse(h.get()[k + 1].str(), nullptr, false);
                if (value.is_object()) {
                    b.queue = string_field(value, "queue");
                    if (auto it = value.find("run_at"); it != value.end() && it->is_number())
                        b.run_at = timestamp_seconds(it->get<double>(), false);
                    // `payload` is a JSON string holding the job (readers accept an object).
                    if (auto it = value.find("payload"); it != value.end())
                        b.job =
                            summarize_job(it->is_string() ? it->get<std::string>() : it->dump());
                } else {
                    b.job = summarize_job(std::string(h.get()[k + 1].str()));
                }
                out.push_back(std::move(b));
            }
        }
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const BusyJob& a, const BusyJob& b) { return a.run_at < b.run_at; });
    return out;
}

std::vector<JobSummary> list_queue(redis::Connection& conn, const Keys& keys,
                                   const std::string& name, size_t limit) {
    // The next job is the rightmost (BRPOP): read from the right end, and reverse.
    const std::string start = limit == 0 ? "0" : std::to_string(-static_cast<long long>(limit));
    auto items = conn.command({"LRANGE", keys.queue(name), start, "-1"});
    std::vector<JobSummary> out;
    for (size_t i = items.size(); i-- > 0;)
        out.push_back(summarize_job(std::string(items[i].str())));
    return out;
}

long long clear_queue(redis::Connection& conn, const Keys& keys, const std::string& name) {
    // KEYS[1] -> queue:<name>; KEYS[2] -> `queues`; ARGV[1] -> the queue name.
    // Returns the length the list had when it was deleted: the number of jobs this call removed,
    // even while clients push to it.
    static const redis::Script script(R"lua(
local n = redis.call('llen', KEYS[1])
redis.call('del', KEYS[1])
redis.call('srem', KEYS[2], ARGV[1])
return n
)lua");
    return script.run(conn, {keys.queue(name), keys.queues()}, {name}).integer();
}

namespace {

// A jid that any JSON encoder writes as itself (Sidekiq's are hex): the raw payload can be
// searched for it. Any other may be stored escaped ("\u001b"), so every payload is parsed.
bool plain_jid(const std::string& jid) {
    return std::all_of(jid.begin(), jid.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
    });
}

bool has_jid(std::string_view payload, const std::string& jid) {
    if (plain_jid(jid) && payload.find(jid) == std::string_view::npos)
        return false;  // cheap test first
    auto job = json::parse(payload, nullptr, false);
    return job.is_object() && string_field(job, "jid") == jid;
}

}  // namespace

std::vector<FoundJob> find_job(redis::Connection& conn, const Keys& keys, const std::string& jid) {
    std::vector<FoundJob> found;
    if (jid.empty()) return found;
    for (const auto& q : fetch_queues(conn, keys)) {
        for (long long start = 0; start < q.size; start += kPage) {
            auto page = conn.command({"LRANGE", keys.queue(q.name), std::to_string(start),
                                      std::to_string(start + kPage - 1)});
            for (size_t i = 0; i < page.size(); ++i)
                if (has_jid(page[i].str(), jid))
                    found.push_back({"queue", q.name, std::nullopt, std::string(page[i].str())});
            if (page.size() < static_cast<size_t>(kPage)) break;
        }
    }
    const std::pair<const char*, std::string> sets[] = {
        {"scheduled", keys.schedule()}, {"retry", keys.retry()}, {"dead", keys.dead()}};
    for (const auto& [where, key] : sets) {
        std::string cursor = "0";
        do {  // as SortedSet#find_job: ZSCAN MATCH *jid*, then the jid field compared
            auto page =
                conn.command({"ZSCAN", key, cursor, "MATCH", plain_jid(jid) ? "*" + jid + "*" : "*",
                              "COUNT", std::to_string(kPage)});
            cursor = std::string(page[0].str());
            for (size_t i = 0; i + 1 < page[1].size(); i += 2)
                if (has_jid(page[1][i].str(), jid))
                    found.push_back({where, key, to_double(std::string(page[1][i + 1].str())),
                                     std::string(page[1][i].str())});
        } while (cursor != "0");
    }
    for (const auto& b : fetch_busy(conn, keys))
        if (b.job.jid == jid) found.push_back({"busy", b.identity, b.run_at, b.job.payload});
    return found;
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
