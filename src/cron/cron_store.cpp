// CronStore (see cron_store.hpp).
#include "cron/cron_store.hpp"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <set>

#include "common/ruby_float.hpp"
#include "cron/cron_expression.hpp"

namespace kiqd {
namespace {

std::tm utc_tm(std::int64_t t) {
    std::tm tm{};
    const std::time_t tt = static_cast<std::time_t>(t);
    gmtime_r(&tt, &tm);
    return tm;
}

std::string strftime_utc(std::int64_t t, const char* format) {
    const std::tm tm = utc_tm(t);
    char buf[64];
    const size_t n = std::strftime(buf, sizeof buf, format, &tm);
    return std::string(buf, n);
}

// Days since the epoch of a civil date (Howard Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = static_cast<unsigned>(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

}  // namespace

std::string iso8601_utc(std::int64_t t) {
    return strftime_utc(t, "%Y-%m-%dT%H:%M:%SZ");
}

std::string last_enqueue_time_text(double t) {
    return strftime_utc(static_cast<std::int64_t>(std::floor(t)), "%Y-%m-%d %H:%M:%S +0000");
}

std::string ruby_time_text(double t) {
    return strftime_utc(static_cast<std::int64_t>(std::floor(t)), "%Y-%m-%d %H:%M:%S UTC");
}

std::optional<std::int64_t> parse_enqueue_time(const std::string& text) {
    // YYYY-MM-DD[ T]HH:MM:SS[.fraction][ ](+hhmm|+hh:mm|Z|UTC)?
    int y, mo, d, h, mi, s, used = 0;
    if (std::sscanf(text.c_str(), "%4d-%2d-%2d%*1[ T]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s,
                    &used) != 6 ||
        used == 0)
        return std::nullopt;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return std::nullopt;
    std::string rest = text.substr(static_cast<size_t>(used));
    if (!rest.empty() && rest[0] == '.') {
        size_t i = 1;
        while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i;
        rest = rest.substr(i);
    }
    while (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
    long offset = 0;
    if (rest.empty() || rest == "Z" || rest == "UTC" || rest == "GMT") {
        offset = 0;
    } else if ((rest[0] == '+' || rest[0] == '-') && rest.size() >= 5) {
        std::string digits;
        for (char c : rest.substr(1))
            if (c != ':') digits += c;
        if (digits.size() != 4 || digits.find_first_not_of("0123456789") != std::string::npos)
            return std::nullopt;
        offset = (std::stol(digits.substr(0, 2)) * 3600 + std::stol(digits.substr(2)) * 60) *
                 (rest[0] == '-' ? -1 : 1);
    } else {
        return std::nullopt;
    }
    return days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) * 86400 +
           h * 3600 + mi * 60 + s - offset;
}

std::string CronJobRecord::queue() const {
    auto parsed = nlohmann::json::parse(field("message"), nullptr, false);
    if (parsed.is_object()) {
        auto q = parsed.find("queue");
        if (q != parsed.end() && q->is_string() && !q->get<std::string>().empty())
            return q->get<std::string>();
    }
    return "default";
}

std::optional<std::int64_t> CronJobRecord::last_enqueue_time() const {
    const std::string t = field("last_enqueue_time");
    if (t.empty()) return std::nullopt;
    return parse_enqueue_time(t);
}

std::vector<CronJobRecord> CronStore::all(redis::Connection& conn,
                                          const std::vector<std::string>& namespaces) const {
    std::vector<redis::Command> sets;
    for (const auto& ns : namespaces) sets.push_back({"SMEMBERS", jobs_key(ns)});
    const auto members = conn.pipeline_unchecked(sets);
    std::vector<redis::Command> gets;
    std::vector<const std::string*> owners;  // the namespace of each HGETALL
    for (size_t s = 0; s < members.size(); ++s) {
        if (members[s].is_error()) continue;  // a key of another type
        for (size_t i = 0; i < members[s].size(); ++i) {
            gets.push_back({"HGETALL", std::string(members[s][i].str())});
            owners.push_back(&namespaces[s]);
        }
    }
    std::vector<CronJobRecord> out;
    if (gets.empty()) return out;
    auto replies = conn.pipeline_unchecked(gets);
    for (size_t j = 0; j < replies.size(); ++j) {
        const auto& r = replies[j];
        if (r.is_error() || r.size() == 0) continue;  // a key of another type, or deleted
        CronJobRecord rec;
        rec.ns = *owners[j];
        for (size_t i = 0; i + 1 < r.size(); i += 2)
            rec.fields[std::string(r[i].str())] = std::string(r[i + 1].str());
        out.push_back(std::move(rec));
    }
    return out;
}

std::vector<std::string> CronStore::discover_namespaces(redis::Connection& conn) const {
    const std::string head = jobs_key() + ":";
    std::set<std::string> found;
    std::string cursor = "0";
    do {
        auto r = conn.command({"SCAN", cursor, "MATCH", head + "*", "COUNT", "1000"});
        cursor = std::string(r[0].str());
        for (size_t i = 0; i < r[1].size(); ++i) {
            const std::string key(r[1][i].str());
            if (key.size() > head.size()) found.insert(key.substr(head.size()));
        }
    } while (cursor != "0");
    return {found.begin(), found.end()};
}

std::vector<std::string> CronStore::migrate_v1(redis::Connection& conn, const std::string& ns,
                                               double now) const {
    std::vector<std::string> moved;
    for (auto& job : all(conn, {""})) {
        const std::string name = job.name();
        const std::string old_key = job_key(name);
        if (name.empty()) continue;
        job.fields["namespace"] = ns;
        redis::Command hset{"HSET", job_key(name, ns)};
        for (const auto& [k, v] : job.fields) {
            hset.push_back(k);
            hset.push_back(v);
        }
        std::vector<redis::Command> writes{{"SADD", jobs_key(ns), job_key(name, ns)},
                                           std::move(hset)};
        // Job#save: a job new to this layout gets its last run marked claimed.
        try {
            const auto cron = CronExpression::parse_cronish(job.field("cron"));
            if (conn.command({"EXISTS", enqueued_key(name, ns)}).integer() == 0)
                writes.push_back({"ZADD", enqueued_key(name, ns), ruby_float_text(now),
                                  iso8601_utc(cron.previous_time(now))});
        } catch (const CronError&) {
        }
        writes.push_back({"SREM", jobs_key(), old_key});
        conn.pipeline(writes);
        moved.push_back(name);
    }
    return moved;
}

void CronStore::save(redis::Connection& conn, const CronScheduleSpec& spec, double now,
                     const std::string& ns) const {
    const std::string key = job_key(spec.name, ns);
    auto current = conn.pipeline({{"HGET", key, "status"},
                                  {"HGET", key, "last_enqueue_time"},
                                  {"EXISTS", enqueued_key(spec.name, ns)}});
    std::string status = current[0].is_nil() ? "enabled" : std::string(current[0].str());
    if (spec.enabled) status = *spec.enabled ? "enabled" : "disabled";
    const std::string last = current[1].is_nil() ? "" : std::string(current[1].str());
    const std::string queue = spec.queue.empty() ? "default" : spec.queue;
    // The message Job#initialize builds for a class Ruby cannot load: {"queue"=>"default"}
    // merged with class and args, then the entry's queue.
    nlohmann::ordered_json message;
    message["queue"] = queue;
    message["class"] = spec.job_class;
    message["args"] = nlohmann::ordered_json::parse(spec.args_json);
    redis::Command hset{"HSET",
                        key,
                        "name",
                        spec.name,
                        "klass",
                        spec.job_class,
                        "cron",
                        spec.cron,
                        "description",
                        spec.description,
                        "source",
                        "schedule",
                        "args",
                        spec.args_json,
                        "message",
                        message.dump(),
                        "status",
                        status,
                        "active_job",
                        spec.active_job ? "1" : "0",
                        "queue_name_prefix",
                        "",
                        "queue_name_delimiter",
                        "",
                        "last_enqueue_time",
                        last,
                        "symbolize_args",
                        "0"};
    if (!ns.empty()) {
        // 2.x's to_hash: the namespace, date_as_argument always, retry ("" when unset).
        for (const char* f : {"namespace", ns.c_str(), "date_as_argument",
                              spec.date_as_argument ? "1" : "0", "retry", ""})
            hset.push_back(f);
    } else if (spec.date_as_argument) {
        hset.push_back("date_as_argument");
        hset.push_back("1");
    }
    std::vector<redis::Command> writes{{"SADD", jobs_key(ns), key}, std::move(hset)};
    if (!spec.date_as_argument && ns.empty()) writes.push_back({"HDEL", key, "date_as_argument"});
    if (current[2].integer() == 0) {
        const auto cron = CronExpression::parse_cronish(spec.cron);
        writes.push_back({"ZADD", enqueued_key(spec.name, ns), ruby_float_text(now),
                          iso8601_utc(cron.previous_time(now))});
    }
    conn.pipeline(writes);
}

std::vector<std::string> CronStore::destroy_removed(
    redis::Connection& conn, const std::vector<std::string>& keep,
    const std::vector<std::string>& namespaces) const {
    const std::set<std::string> wanted(keep.begin(), keep.end());
    std::vector<std::string> removed;
    for (const auto& job : all(conn, namespaces)) {
        if (job.source() != "schedule" || wanted.count(job.name())) continue;
        destroy(conn, job.name(), job.ns);
        removed.push_back(job.name());
    }
    return removed;
}

void CronStore::destroy(redis::Connection& conn, const std::string& name,
                        const std::string& ns) const {
    conn.pipeline({{"SREM", jobs_key(ns), job_key(name, ns)},
                   {"DEL", enqueued_key(name, ns)},
                   {"DEL", jid_history_key(name, ns)},
                   {"DEL", job_key(name, ns)}});
}

}  // namespace kiqd
