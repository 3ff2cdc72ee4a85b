// CronPoller (see cron_poller.hpp).
#include "cron/cron_poller.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "cron/cron_flag.hpp"
#include "job/dead_set.hpp"
#include "kiqd/deadline.hpp"
#include "redis/lua_type_guard.hpp"
#include "server/connection_budget.hpp"

namespace kiqd {
namespace {

// Claims one run of a cron job and enqueues it, in one step.
// KEYS[1] -> cron_job:<name>:enqueued (the claims)
// KEYS[2] -> cron_job:<name> (the job's hash)
// KEYS[3] -> cron_job:<name>:jid_history
// KEYS[4] -> the "queues" set
// KEYS[5] -> the destination: "queue:<q>" (mode queue), "schedule" (mode schedule), or
//            "queues" again (mode none: not written)
// --
// ARGV[1] -> the run's time, as the gem scores it (Float#to_s)
// ARGV[2] -> the run's time in ISO 8601 UTC (the claim's member)
// ARGV[3] -> queue | schedule | none (a client middleware stopped the push)
// ARGV[4] -> the queue name
// ARGV[5] -> the payload
// ARGV[6] -> its score in "schedule" (mode schedule)
// ARGV[7] -> last_enqueue_time, in the gem's format
// ARGV[8] -> the jid history entry
// ARGV[9] -> the last index the jid history keeps
// ARGV[10] -> the exclusive upper score of the claims to forget ("(<now - 24 h>")
// Returns 1 when this call enqueued the run; 0 when the run was already claimed; -1 when the job
// is gone or disabled; a WRONGTYPE error, nothing written, when a key holds another type.
constexpr const char* kEnqueueScript = KIQD_LUA_TYPE_GUARD R"lua(
local dest = 'list'
if ARGV[3] == 'schedule' then dest = 'zset' elseif ARGV[3] == 'none' then dest = 'set' end
local refused = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'list', KEYS[4], 'set',
                            KEYS[5], dest})
if refused then return refused end
if redis.call('exists', KEYS[2]) == 0 then return -1 end
local status = redis.call('hget', KEYS[2], 'status')
if status and status ~= 'enabled' then return -1 end
if redis.call('zadd', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
if ARGV[3] == 'queue' then
  redis.call('sadd', KEYS[4], ARGV[4])
  redis.call('lpush', KEYS[5], ARGV[5])
elseif ARGV[3] == 'schedule' then
  redis.call('zadd', KEYS[5], ARGV[6], ARGV[5])
end
redis.call('hset', KEYS[2], 'last_enqueue_time', ARGV[7])
redis.call('lpush', KEYS[3], ARGV[8])
redis.call('ltrim', KEYS[3], 0, tonumber(ARGV[9]))
redis.call('zremrangebyscore', KEYS[1], 0, ARGV[10])
return 1
)lua";

// A one-off `at:` run, claimed once across the fleet and pushed in the same call.
// KEYS[1] the claim (kiqd:scheduler:at:<name>:<time>)   KEYS[2] schedule
// ARGV[1] the claim's TTL in seconds   ARGV[2] the run's time (its score)   ARGV[3] the payload
// Returns 1 when this call claimed and pushed it, 0 when another process had.
constexpr const char* kOneOffScript = R"lua(
if not redis.call('set', KEYS[1], ARGV[2], 'NX', 'EX', ARGV[1]) then return 0 end
redis.call('zadd', KEYS[2], ARGV[2], ARGV[3])
return 1
)lua";

constexpr double kRememberSeconds = 24 * 60 * 60;  // the gem's REMEMBER_THRESHOLD
constexpr unsigned kLayoutRefreshRounds = 10;      // look for new 2.x namespaces every ~5 min

std::string uuid_v4(std::mt19937_64& rng) {
    unsigned char b[16];
    for (int i = 0; i < 16; i += 8) {
        const auto r = rng();
        for (int j = 0; j < 8; ++j) b[i + j] = static_cast<unsigned char>(r >> (8 * j));
    }
    b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
    b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
    char out[37];
    std::snprintf(out, sizeof out,
                  "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                  b[14], b[15]);
    return out;
}

}  // namespace

CronPoller::CronPoller(Runtime& rt, const Client& client)
    : rt_(rt),
      client_(client),
      store_(rt.keys),
      enqueue_script_(kEnqueueScript),
      one_off_script_(kOneOffScript),
      started_(epoch_seconds()),
      rng_(std::random_device{}()),
      worker_("cron", rt.log) {}

CronPoller::~CronPoller() {
    stop();
}

void CronPoller::report(const std::string& name, const std::string& problem) {
    auto it = problems_.find(name);
    if (problem.empty()) {
        if (it != problems_.end()) {
            rt_.log.info("cron: job {} is fine again", name);
            problems_.erase(it);
        }
        return;
    }
    if (it != problems_.end() && it->second == problem) return;
    rt_.log.error("cron: job {}: {}", name, problem);
    problems_[name] = problem;
}

const CronExpression* CronPoller::expression(const CronJobRecord& job) {
    const std::string line = job.field("cron");
    auto it = parsed_.find(line);
    if (it != parsed_.end()) return it->second.get();
    std::unique_ptr<CronExpression> parsed;
    try {
        parsed = std::make_unique<CronExpression>(CronExpression::parse_cronish(line));
    } catch (const CronError& e) {
        // Cached as null too, so a bad line is parsed and logged once.
        report(job.name(), "cron line '" + line + "' is not usable: " + e.what());
    }
    if (parsed_.size() > 10000) parsed_.clear();  // lines of deleted jobs do not pile up
    return parsed_.emplace(line, std::move(parsed)).first->second.get();
}

void CronPoller::refresh_layout(redis::Connection& conn, double now) {
    const Config& c = rt_.config;
    std::vector<std::string> found = c.cron_namespaces;
    if (c.cron_layout != CronLayoutSetting::v1 && found.empty())
        found = store_.discover_namespaces(conn);
    const bool v2 = c.cron_layout == CronLayoutSetting::v2 ||
                    (c.cron_layout == CronLayoutSetting::auto_detect && !found.empty());
    std::set<std::string> namespaces(found.begin(), found.end());
    if (v2) {
        namespaces.insert(c.cron_namespace);
        for (const auto& spec : c.cron)
            if (!spec.ns.empty()) namespaces.insert(spec.ns);
    }
    std::vector<std::string> sets;
    // 1.x's set: the only one with layout v1; with auto, read too, so a job the gem's 2.x
    // poller has not migrated yet still fires (the migration marks its last run claimed).
    if (c.cron_layout != CronLayoutSetting::v2) sets.push_back("");
    sets.insert(sets.end(), namespaces.begin(), namespaces.end());
    if (v2 && !v2_) {
        // What sidekiq-cron 2.x's poller does when it starts.
        for (const auto& moved : store_.migrate_v1(conn, c.cron_namespace, now))
            rt_.log.info("cron: moved job {} from sidekiq-cron 1.x's keys to namespace {}", moved,
                         c.cron_namespace);
    }
    if (v2 != v2_ || sets != sets_)
        rt_.log.info("cron: sidekiq-cron {} layout; reading {}", v2 ? "2.x" : "1.x",
                     describe_sets(sets));
    v2_ = v2;
    sets_ = std::move(sets);
}

std::string CronPoller::describe_sets(const std::vector<std::string>& sets) const {
    std::string out;
    for (const auto& ns : sets) {
        if (!out.empty()) out += ", ";
        out += store_.jobs_key(ns);
    }
    return out;
}

void CronPoller::save_schedules(redis::Connection& conn, double now) {
    if (sets_.empty()) refresh_layout(conn, now);
    std::vector<std::string> names;
    for (const auto& spec : rt_.config.cron)
        if (!spec.one_off()) names.push_back(spec.name);
    if (names.empty()) return;
    for (const auto& gone : store_.destroy_removed(conn, names, sets_))
        rt_.log.info("cron: removed schedule {} (no longer in the configuration)", gone);
    for (const auto& spec : rt_.config.cron) {
        if (spec.one_off()) continue;
        const std::string ns = !v2_ ? "" : spec.ns.empty() ? rt_.config.cron_namespace : spec.ns;
        try {
            store_.save(conn, spec, now, ns);
        } catch (const CronError& e) {
            report(spec.name, "not written: cron line '" + spec.cron + "': " + e.what());
        }
    }
    rt_.log.info("cron: {} schedule(s) from the configuration written to sidekiq-cron {}'s keys",
                 names.size(), v2_ ? "2.x" : "1.x");
}

size_t CronPoller::push_one_offs(redis::Connection& conn, double now, double horizon) {
    size_t pushed = 0;
    for (const auto& spec : rt_.config.cron) {
        if (!spec.one_off() || one_offs_done_.count(spec.name)) continue;
        const double due = spec.once_at ? *spec.once_at : started_ + *spec.once_in;
        if (due > now + horizon) continue;  // a later poll pushes it
        // Done once pushed, claimed by another process, or given up; a Redis error leaves it
        // to the next poll (an at: run's claim keeps a retry from pushing it twice).
        one_offs_done_.insert(spec.name);
        if (now - due > static_cast<double>(rt_.config.cron_reschedule_grace_period)) {
            rt_.log.warn(
                "cron: one-off schedule {} was due at {}, before this process could "
                "push it; skipped",
                spec.name, iso8601_utc(static_cast<std::int64_t>(due)));
            continue;
        }
        nlohmann::ordered_json item;
        item["class"] = spec.job_class;
        item["queue"] = spec.queue.empty() ? "default" : spec.queue;
        item["args"] = nlohmann::ordered_json::parse(spec.args_json);
        item["at"] = due;
        std::string payload;
        try {
            auto normalized = client_.normalize(std::move(item));
            if (!client_.chain().empty() && !client_.chain().invoke(normalized, conn)) {
                rt_.log.info("cron: one-off {}: a client middleware stopped the push", spec.name);
                continue;
            }
            payload = client_.prepare(std::move(normalized)).payload;
        } catch (const std::invalid_argument& e) {
            report(spec.name, std::string("its job is not valid: ") + e.what());
            continue;
        }
        const std::string score = score_text(due);
        bool ours = true;
        try {
            if (spec.once_at) {
                // Claimed for a day past its time: long enough for every process to see it.
                const auto ttl = static_cast<long long>(std::max(0.0, due - now)) + 86400;
                const std::string claim =
                    rt_.keys.prefix() + "kiqd:scheduler:at:" + spec.name + ":" + score;
                ours = one_off_script_
                           .run(conn, {claim, rt_.keys.schedule()},
                                {std::to_string(ttl), score, payload})
                           .integer() == 1;
            } else {
                conn.command({"ZADD", rt_.keys.schedule(), score, payload});
            }
        } catch (const redis::Error&) {
            one_offs_done_.erase(spec.name);
            throw;
        }
        if (!ours) continue;
        rt_.log.info("cron: one-off {} ({}) pushed to run at {}", spec.name, spec.job_class,
                     iso8601_utc(static_cast<std::int64_t>(due)));
        ++pushed;
    }
    return pushed;
}

size_t CronPoller::enqueue_due(redis::Connection& conn, double now) {
    if (sets_.empty() || ++rounds_ % kLayoutRefreshRounds == 0) refresh_layout(conn, now);
    size_t enqueued = 0;
    for (const auto& job : store_.all(conn, sets_)) {
        if (rt_.lifecycle.is_quiet()) break;
        try {
            if (enqueue_job(conn, job, now)) ++enqueued;
        } catch (const redis::ReplyError& e) {
            // One job's keys of the wrong type: the others still run.
            report(job.name(), e.what());
        } catch (const CronError& e) {
            // A line that parses but never fires within fugit's search (Feb 29 on a Monday).
            report(job.name(), "cron line '" + job.field("cron") + "': " + e.what());
        }
    }
    return enqueued;
}

bool CronPoller::enqueue_job(redis::Connection& conn, const CronJobRecord& job, double now) {
    // Job#valid? and should_enque?, in the gem's order.
    const std::string name = job.name();
    if (name.empty() || job.klass().empty()) return false;
    const CronExpression* cron = expression(job);
    if (!cron || !job.enabled()) return false;
    const std::int64_t run = cron->previous_time(now);
    // The gem's not_past_scheduled_time? (reschedule_grace_period, 60 s by default).
    if (static_cast<std::int64_t>(now) - run > rt_.config.cron_reschedule_grace_period)
        return false;
    const auto last = job.last_enqueue_time();
    if (last && *last >= run) return false;
    const std::string run_iso = iso8601_utc(run);
    // Claimed already (the usual case for all but one poller): no payload, no middleware.
    if (!conn.command({"ZSCORE", store_.enqueued_key(name, job.ns), run_iso}).is_nil())
        return false;

    // The payload, as Job#enque! builds it for a class that Ruby cannot load here.
    auto args = nlohmann::ordered_json::parse(job.field("args"), nullptr, false);
    if (args.is_discarded()) args = nlohmann::ordered_json::array({job.field("args")});
    if (args.is_null()) args = nlohmann::ordered_json::array();
    if (!args.is_array()) args = nlohmann::ordered_json::array({args});
    if (cron_flag_set(job.field("date_as_argument"))) args.push_back(epoch_seconds());
    nlohmann::ordered_json item;
    if (cron_flag_set(job.field("active_job"))) {
        std::string queue = job.queue();
        const std::string prefix = job.field("queue_name_prefix");
        if (!prefix.empty()) {
            const std::string delimiter = job.field("queue_name_delimiter");
            queue = prefix + (delimiter.empty() ? "_" : delimiter) + queue;
        }
        item["class"] = "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper";
        item["wrapped"] = job.klass();
        item["queue"] = queue;
        const std::string description = job.field("description");
        item["description"] = description.empty() ? nlohmann::ordered_json(nullptr)
                                                  : nlohmann::ordered_json(description);
        item["args"] = nlohmann::ordered_json::array({{{"job_class", job.klass()},
                                                       {"job_id", uuid_v4(rng_)},
                                                       {"queue_name", queue},
                                                       {"arguments", args}}});
    } else {
        item = nlohmann::ordered_json::parse(job.field("message"), nullptr, false);
        if (!item.is_object()) {
            report(name, "its message is not a JSON object; not enqueued");
            return false;
        }
        item["args"] = args;
    }
    std::string mode = "none", payload, queue, at;
    std::string jid;
    try {
        auto normalized = client_.normalize(std::move(item));
        if (client_.chain().empty() || client_.chain().invoke(normalized, conn)) {
            auto prepared = client_.prepare(std::move(normalized));
            jid = prepared.jid;
            queue = prepared.queue;
            payload = prepared.payload;
            mode = prepared.at ? "schedule" : "queue";
            if (prepared.at) at = score_text(*prepared.at);
        }
    } catch (const std::invalid_argument& e) {
        report(name, std::string("its job is not valid: ") + e.what());
        return false;
    }
    nlohmann::ordered_json history;
    history["jid"] = jid.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(jid);
    history["enqueued"] = ruby_time_text(now);
    const std::string destination = mode == "schedule" ? rt_.keys.schedule()
                                    : mode == "queue"  ? rt_.keys.queue(queue)
                                                       : rt_.keys.queues();  // unused
    auto reply =
        enqueue_script_.run(conn,
                            {store_.enqueued_key(name, job.ns), store_.job_key(name, job.ns),
                             store_.jid_history_key(name, job.ns), rt_.keys.queues(), destination},
                            {ruby_float_text(static_cast<double>(run)), run_iso, mode, queue,
                             payload, at, last_enqueue_time_text(now), history.dump(),
                             std::to_string(rt_.config.cron_history_size - 1),
                             "(" + ruby_float_text(now - kRememberSeconds)});
    if (reply.is_error()) throw redis::ReplyError(std::string(reply.error_text()));
    report(name, "");
    if (reply.integer() != 1) return false;
    if (mode == "none")
        rt_.log.info("cron: {} due at {}: a client middleware stopped the push", name, run_iso);
    else
        rt_.log.info("cron: enqueued {} ({}) due at {} as {}", name, job.klass(), run_iso, jid);
    return true;
}

void CronPoller::poll() {
    // Sidekiq stops the gem's poller on quiet: from then on the rounds do nothing.
    if (rt_.lifecycle.is_quiet()) return;
    try {
        const auto started = RedisHealth::Clock::now();
        const double now = epoch_seconds();
        if (!schedules_saved_) {
            save_schedules(*conn_, now);
            schedules_saved_ = true;
        }
        enqueue_due(*conn_, now);
        // Pushed by the last poll before they are due: the next comes within 1.5 intervals.
        push_one_offs(*conn_, now, 1.5 * rt_.config.cron_poll_interval);
        rt_.health.succeeded(started);
    } catch (const redis::Error& e) {
        rt_.health.failed(e);
    }
}

void CronPoller::start() {
    const double interval = rt_.config.cron_poll_interval;
    if (!(interval > 0)) {
        rt_.log.info("cron: cron_poll_interval is 0: sidekiq-cron jobs are not polled");
        return;
    }
    conn_ = std::make_unique<redis::Connection>(
        named_connection(rt_.connection_options, rt_.identity, "cron"));
    const auto seconds = [](double s) {
        return saturating_cast<PeriodicWorker::Duration>(std::chrono::duration<double>(s));
    };
    std::uniform_real_distribution<double> r(0.0, 1.0);
    // Sidekiq's initial wait (10 s + rand·5 s) unless the interval is set explicitly; the
    // YAML's schedules are written at that first round.
    const double initial = rt_.config.cron_poll_interval_set ? r(rng_) * std::min(5.0, interval)
                                                             : 10.0 + r(rng_) * 5.0;
    worker_.start(
        seconds(initial),
        [this, seconds, interval] {
            std::uniform_real_distribution<double> u(0.0, 1.0);
            return seconds(interval * u(rng_) + interval / 2);  // random_poll_interval, < 10
        },
        [this] { poll(); });
}

void CronPoller::stop() noexcept {
    worker_.stop();
}

}  // namespace kiqd
