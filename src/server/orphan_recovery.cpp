#include "server/orphan_recovery.hpp"

#include <fmt/format.h>

#include <map>
#include <set>
#include <thread>

#include "common/outcome_counters.hpp"
#include "fetch/cpu_gate.hpp"
#include "kiqd/clock.hpp"
#include "redis/lua_type_guard.hpp"
#include "server/connection_budget.hpp"

namespace kiqd {
namespace {

// Moves one job from a working list back to the front of its queue, only if this call removed
// it (LREM), so two recoveries never requeue it twice. LREM searches from the head, where a
// recovery pass (newest first) finds each job at once: from the tail, a pass over a list of n
// jobs cost n²/2 comparisons (200,000 orphans: minutes). With the poison-pill guard on, it counts
// the interruption — when the job is known to have started: always for a process that fetched
// one job at a time, only if it is in the started set for one that batched (the set exists,
// with its "" member, exactly for those) — and sends the job to the dead set instead once the
// count reaches the maximum. A requeued job becomes a suspect (reliable_fetcher.hpp), so that
// its next start is known.
// KEYS[1] -> the working list ("queue:sq|<identity>|<queue>")
// KEYS[2] -> the queue list ("queue:<queue>")
// KEYS[3] -> the "queues" set
// KEYS[4] -> the interruptions hash ("kiqd:reliable:interruptions": jid -> count)
// KEYS[5] -> the dead set ("dead")
// KEYS[6] -> the working list owner's started set ("kiqd:reliable:started:<identity>")
// KEYS[7] -> the suspects set ("kiqd:reliable:suspects")
// KEYS[8] -> the working list owner's liveness key ("kiqd:reliable:alive:<identity>")
// KEYS[9] -> the owner's recoveries counter ("kiqd:reliable:recoveries:<identity>"), increased
//            for each job moved while the owner's key was missing (ownership_fence.hpp)
// --
// ARGV[1] -> the payload
// ARGV[2] -> the queue name (added to KEYS[3])
// ARGV[3] -> the interruption key (the jid, or a hash of an unparseable payload)
// ARGV[4] -> max interruptions (0: do not count)
// ARGV[5] -> the TTL of the interruptions hash and of the suspects set, in seconds
// ARGV[6] -> the dead-set score (now, epoch seconds)
// ARGV[7] -> the dead-set entry (only used when ARGV[4] > 0)
// ARGV[8] -> "1": only while KEYS[8] is missing (recovery of another process's list: an owner
//            that came back, from a stall or an outage, owns its jobs again and may start them
//            once it has proved so, ownership_fence.hpp); "0": whatever KEYS[8] holds
// Returns 0 when the job was no longer in the working list (someone else moved it), 1 when it
// was requeued, 2 when it went to the dead set, 3 when it was requeued without being counted
// (not known to have started), 4 when the owner is alive (nothing written); a WRONGTYPE error
// with nothing written (the job stays in the working list) when a key it would write holds
// another type.
constexpr const char* kRequeueScript = KIQD_LUA_TYPE_GUARD R"lua(
local refused = wrong_type({KEYS[2], 'list', KEYS[3], 'set', KEYS[4], 'hash', KEYS[5], 'zset',
                            KEYS[6], 'set', KEYS[7], 'set'})
if refused then return refused end
if ARGV[8] == '1' and redis.call('exists', KEYS[8]) == 1 then return 4 end
if redis.call('lrem', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
if ARGV[8] == '1' then
  redis.call('incr', KEYS[9])
  redis.call('expire', KEYS[9], ARGV[5])
end
local max = tonumber(ARGV[4])
local counted = false
if max > 0 then
  if redis.call('exists', KEYS[6]) == 0 or redis.call('sismember', KEYS[6], ARGV[1]) == 1 then
    counted = true
    local n = redis.call('hincrby', KEYS[4], ARGV[3], 1)
    redis.call('expire', KEYS[4], ARGV[5])
    if n >= max then
      redis.call('hdel', KEYS[4], ARGV[3])
      redis.call('srem', KEYS[7], ARGV[1])
      redis.call('zadd', KEYS[5], ARGV[6], ARGV[7])
      return 2
    end
  end
  redis.call('sadd', KEYS[7], ARGV[1])
  redis.call('expire', KEYS[7], ARGV[5])
end
redis.call('sadd', KEYS[3], ARGV[2])
redis.call('rpush', KEYS[2], ARGV[1])
if max > 0 and not counted then return 3 end
return 1
)lua";

// Unregisters a recovered working list, but only once it is empty: a job pushed onto it in
// between keeps it registered for the next recovery.
// KEYS[1] -> the working list
// KEYS[2] -> the working-lists registry ("kiqd:reliable:working")
// Returns 1 when the list was unregistered, 0 when it was not empty.
constexpr const char* kUnregisterIfEmptyScript =
    "if redis.call('llen', KEYS[1]) == 0 then "
    "redis.call('srem', KEYS[2], KEYS[1]) return 1 end return 0";

// Interruption counts are forgotten a week after a job's last interruption (and suspects a week
// after the last one was added).
constexpr long long kInterruptionsTtlSeconds = ReliableFetcher::kSuspectsTtlSeconds;

// Splits "<prefix>queue:sq|<identity>|<queue>" into identity and queue; false if not one.
// Split at the last '|': queue names cannot contain one (check_queue_name), and kiqd's own
// identities cannot either (encode_host_name), but another client's identity might.
bool parse_working_key(const Keys& keys, const std::string& key, std::string& identity,
                       std::string& queue) {
    const std::string head = keys.queue("sq|");
    if (key.compare(0, head.size(), head) != 0) return false;
    const auto bar = key.rfind('|');
    if (bar == std::string::npos || bar < head.size()) return false;
    identity = key.substr(head.size(), bar - head.size());
    queue = key.substr(bar + 1);
    return !identity.empty() && !queue.empty();
}

// The jid when the payload has one, else a hash of its bytes (an unparseable payload still
// needs a stable name for its interruption count).
std::string interruption_key(const std::string& payload, const std::string& queue) {
    auto parsed = parse_job(payload, queue);
    if (auto* job = std::get_if<Job>(&parsed); job && !job->jid.empty()) return job->jid;
    return fmt::format("raw:{:016x}", std::hash<std::string>{}(payload));
}

}  // namespace

OrphanRecovery::OrphanRecovery(Runtime& rt, const ReliableFetcher& fetcher)
    : rt_(rt),
      fetcher_(fetcher),
      requeue_script_(kRequeueScript),
      acks_(rt, fetcher),
      liveness_("reliable-alive", rt.log),
      worker_("orphan-recovery", rt.log) {}

OrphanRecovery::~OrphanRecovery() {
    stop(false);
}

void OrphanRecovery::start() {
    liveness_conn_.emplace(named_connection(rt_.connection_options, rt_.identity, "liveness"));
    conn_.emplace(named_connection(rt_.connection_options, rt_.identity, "orphan-recovery"));
    next_check_ = DueTime();  // recover once at start, as super_fetch
    const auto every = rt_.config.reliable_fetch.liveness_ttl / 3;
    acks_.start();
    liveness_.start(PeriodicWorker::Duration::zero(), every, [this] { keep_alive(); });
    worker_.start(PeriodicWorker::Duration::zero(), every, [this] { round(); });
}

std::string OrphanRecovery::refusal_key() const {
    return rt_.keys.prefix() + "kiqd:reliable:writes-refused";
}

long long OrphanRecovery::register_alive(redis::Connection& conn) {
    const auto& cfg = rt_.config.reliable_fetch;
    const auto sent = RedisHealth::Clock::now();
    const std::string ttl = std::to_string(cfg.liveness_ttl.count());
    const std::string alive = rt_.keys.alive(fetcher_.identity());
    redis::Command sadd{"SADD", rt_.keys.working_lists()};
    for (const auto& [queue, list] : fetcher_.working_lists()) sadd.push_back(list);
    // PEXPIRE first: Redis out of memory (maxmemory with noeviction) still takes it, where it
    // refuses SET, so a live process keeps its key through such a window. SET NX creates the key
    // when it is missing (the first round, or after a lapse).
    std::vector<redis::Command> commands{
        sadd, {"PEXPIRE", alive, ttl}, {"SET", alive, "1", "PX", ttl, "NX"}};
    // A batching process's started set exists from its first fetch on: recovery tells by it
    // that only the jobs in it are known to have started.
    if (fetcher_.batch_size() > 1)
        commands.push_back({"SADD", fetcher_.started_key(fetcher_.identity()), ""});
    // Writes were refused lately: tell the fleet's recoveries to wait (recover_orphans), also
    // those of processes that started after the window or never wrote during it.
    const auto windows = rt_.health.refusal_windows();
    const bool record = rt_.health.refusing() || windows != recorded_windows_;
    if (record) commands.push_back({"SET", refusal_key(), fetcher_.identity(), "PX", ttl});
    commands.push_back({"GET", fetcher_.recoveries_key(fetcher_.identity())});
    auto replies = conn.pipeline_unchecked(commands);
    const auto& recoveries = replies.back();
    if (recoveries.is_error()) throw redis::ReplyError(std::string(recoveries.error_text()));
    std::optional<std::string> refused;
    for (size_t i = 0; i + 1 < replies.size() && !refused; ++i)
        if (replies[i].is_error()) refused = std::string(replies[i].error_text());
    const bool renewed = (replies[1].is_integer() && replies[1].integer() == 1) ||
                         (!replies[2].is_error() && replies[2].is_string());
    const bool key_there = renewed || (!replies[2].is_error() && replies[2].is_nil());
    if (refused) {
        const redis::ReplyError error(*refused);
        rt_.health.failed(error);
        // Not registered yet (the processors would fetch into lists no recovery knows), or the
        // key not renewed: this round did not keep the process alive.
        if (!registered_ || !key_there) throw error;
    } else {
        registered_ = true;
        rt_.health.wrote(sent);
        if (record) recorded_windows_ = rt_.health.refusal_windows();
    }
    return recoveries.is_nil() ? 0 : std::stoll(std::string(recoveries.str()));
}

void OrphanRecovery::keep_alive() {
    try {
        const auto sent = OwnershipFence::Clock::now();
        const long long recoveries = register_alive(*liveness_conn_);
        // Before the processors may fetch: a job fetched from now on is known to be owned.
        fetcher_.fence().renewed(sent, OwnershipFence::Clock::now(),
                                 rt_.config.reliable_fetch.liveness_ttl, recoveries);
        fetcher_.set_ready();
        if (const auto dropped = fetcher_.fence().dropped(); dropped > dropped_logged_) {
            rt_.log.warn(
                "reliable fetch: {} fetched job(s) not started: this process was away longer "
                "than liveness_ttl and another process recovered them (they run there)",
                dropped - dropped_logged_);
            dropped_logged_ = dropped;
        }
    } catch (const redis::Error& e) {
        // The processors report Redis outages; this thread just tries again next round.
        rt_.log.debug("reliable fetch: liveness refresh failed: {}", e.what());
    }
}

void OrphanRecovery::round() {
    try {
        if (size_t n = return_stranded(*conn_))
            rt_.log.warn(
                "reliable fetch: returned {} stranded job(s) to their queues "
                "(fetched, but the reply never reached a processor)",
                n);
        if (next_check_.reached()) {
            next_check_.set_in(rt_.config.reliable_fetch.orphan_check_interval);
            const auto r = recover_orphans(*conn_);
            if (r.lists > 0)
                rt_.log.warn(
                    "reliable fetch: recovered {} orphaned working list(s): {} job(s) back "
                    "in their queues ({} not known to have started, not counted as "
                    "interrupted), {} sent to the dead set",
                    r.lists, r.requeued, r.uncounted, r.dead);
        }
    } catch (const redis::Error& e) {
        // The processors report Redis outages; this thread just tries again next round.
        // Acknowledgements held up by the outage are still on their way: suspect nothing.
        suspects_.clear();
        rt_.log.debug("reliable fetch: recovery round failed: {}", e.what());
    } catch (const std::exception& e) {
        rt_.log.error("reliable fetch: orphan recovery error: {}", e.what());
    }
}

bool OrphanRecovery::writes_refused_lately(redis::Connection& conn) {
    const auto ttl = rt_.config.reliable_fetch.liveness_ttl;
    // This process saw the refusals itself, or another one recorded them in Redis: while Redis
    // refuses writes no process can renew its liveness key (MISCONF, READONLY refuse PEXPIRE
    // too), so a key missing now may be a live process's. A full liveness_ttl after writes work
    // again every live process has renewed its key, and a key still missing is death.
    const bool refused = rt_.health.writes_refused_within(ttl) ||
                         conn.command({"EXISTS", refusal_key()}).integer() == 1;
    if (refused && !waiting_logged_)
        rt_.log.warn(
            "reliable fetch: Redis refused writes within the last liveness_ttl: orphan recovery "
            "waits until writes have worked for liveness_ttl ({} s), so that live processes "
            "whose liveness keys lapsed meanwhile renew them",
            std::chrono::duration<double>(ttl).count());
    waiting_logged_ = refused;
    return refused;
}

OrphanRecovery::Result OrphanRecovery::recover_orphans(redis::Connection& conn, bool take_lock) {
    Result result;
    if (writes_refused_lately(conn)) return result;
    if (take_lock) {
        auto won =
            conn.command({"SET", rt_.keys.recovery_lock(), fetcher_.identity(), "NX", "PX",
                          std::to_string(rt_.config.reliable_fetch.orphan_check_interval.count())});
        if (won.is_nil()) return result;
    }
    result.ran = true;
    auto members = conn.command({"SMEMBERS", rt_.keys.working_lists()});
    struct Orphan {
        std::string list, identity, queue;
    };
    std::vector<Orphan> candidates;
    std::vector<std::string> stale;  // registry entries that are not working lists at all
    std::set<std::string> identities;
    for (size_t i = 0; i < members.size(); ++i) {
        Orphan o{std::string(members[i].str()), {}, {}};
        if (!parse_working_key(rt_.keys, o.list, o.identity, o.queue)) {
            stale.push_back(o.list);
            continue;
        }
        if (o.identity == fetcher_.identity()) continue;
        identities.insert(o.identity);
        candidates.push_back(std::move(o));
    }
    if (!stale.empty()) {
        redis::Command srem{"SREM", rt_.keys.working_lists()};
        srem.insert(srem.end(), stale.begin(), stale.end());
        conn.command(srem);
    }
    if (candidates.empty()) return result;
    std::vector<redis::Command> checks;
    for (const auto& id : identities) checks.push_back({"EXISTS", rt_.keys.alive(id)});
    auto replies = conn.pipeline(checks);
    std::set<std::string> dead_owners;
    size_t i = 0;
    for (const auto& id : identities)
        if (replies[i++].integer() == 0) dead_owners.insert(id);
    for (const auto& o : candidates) {
        if (!dead_owners.count(o.identity)) continue;
        rt_.log.warn("reliable fetch: process {} is gone; recovering {}", o.identity, o.list);
        if (!recover_list(conn, o.list, o.queue, o.identity, true, result)) {
            // Its owner came back in the middle (a stall or an outage ended): the rest is its.
            rt_.log.warn("reliable fetch: process {} is back; leaving the rest of {} to it",
                         o.identity, o.list);
            dead_owners.erase(o.identity);
            continue;
        }
        conn.command({"EVAL", kUnregisterIfEmptyScript, "2", o.list, rt_.keys.working_lists()});
        ++result.lists;
    }
    // Every list of those owners has been emptied: their start marks are of no more use.
    if (!dead_owners.empty()) {
        redis::Command del{"DEL"};
        for (const auto& id : dead_owners) del.push_back(fetcher_.started_key(id));
        conn.command(del);
    }
    return result;
}

size_t OrphanRecovery::return_stranded(redis::Connection& conn,
                                       std::chrono::steady_clock::duration after) {
    // Snapshot the running jobs before reading the lists: a job fetched in between shows up as
    // a suspect once, and is running (or done) by the time it could be returned.
    std::multiset<std::string> running;
    for (auto& e : rt_.work.snapshot()) running.insert(std::move(e.job.payload));
    // Buffered by a batched fetch, or done with the acknowledgement deferred: held, not lost.
    for (auto& p : fetcher_.held_payloads()) running.insert(std::move(p));
    // cpu-bound jobs waiting in this process for a slot (cpu_gate.hpp) are claimed too.
    if (rt_.cpu_gate)
        for (auto& p : rt_.cpu_gate->held_payloads()) running.insert(std::move(p));
    const auto now = std::chrono::steady_clock::now();
    decltype(suspects_) still;
    Result result;
    // Every list in one pipeline (one round trip for 500 queues, not 500).
    std::vector<redis::Command> reads;
    for (const auto& w : fetcher_.working_lists()) reads.push_back({"LRANGE", w.second, "0", "-1"});
    const auto lists = conn.pipeline(reads);
    size_t at = 0;
    for (const auto& [queue, list] : fetcher_.working_lists()) {
        const auto& jobs = lists[at++];
        for (size_t i = 0; i < jobs.size(); ++i) {
            std::string payload(jobs[i].str());
            if (auto it = running.find(payload); it != running.end()) {
                running.erase(it);
                continue;
            }
            auto key = std::make_pair(list, std::move(payload));
            auto seen = suspects_.find(key);
            const auto since = seen == suspects_.end() ? now : seen->second;
            if (now - since >= after)
                requeue_one(conn, list, queue, fetcher_.identity(), key.second, 0, false, result);
            else
                still.emplace(std::move(key), since);
        }
    }
    suspects_ = std::move(still);
    return result.requeued;
}

bool OrphanRecovery::recover_list(redis::Connection& conn, const std::string& list,
                                  const std::string& queue, const std::string& owner, bool orphan,
                                  Result& result) {
    const int max = orphan ? rt_.config.reliable_fetch.max_interruptions : 0;
    // LRANGE lists the newest fetch first; RPUSHing in that order puts the oldest at the very
    // front, so the jobs come back in the order they were fetched.
    auto jobs = conn.command({"LRANGE", list, "0", "-1"});
    for (size_t i = 0; i < jobs.size(); ++i)
        if (!requeue_one(conn, list, queue, owner, std::string(jobs[i].str()), max, orphan, result))
            return false;
    return true;
}

bool OrphanRecovery::requeue_one(redis::Connection& conn, const std::string& list,
                                 const std::string& queue, const std::string& owner,
                                 const std::string& payload, int max, bool only_if_dead,
                                 Result& result) {
    const std::string message = fmt::format(
        "interrupted {} times: the kiqd process running it died each time "
        "(reliable_fetch.max_interruptions: {})",
        max, max);
    const double now = epoch_seconds();
    auto reply = requeue_script_.run(
        conn,
        {list, rt_.keys.queue(queue), rt_.keys.queues(), rt_.keys.interruptions(), rt_.keys.dead(),
         fetcher_.started_key(owner), fetcher_.suspects_key(), rt_.keys.alive(owner),
         fetcher_.recoveries_key(owner)},
        {payload, queue, interruption_key(payload, queue), std::to_string(max),
         std::to_string(kInterruptionsTtlSeconds), score_text(now),
         max > 0 ? rt_.dead.invalid_entry(payload, queue,
                                          InvalidJob{"Kiqd::RepeatedlyInterrupted", message})
                 : std::string(),
         only_if_dead ? "1" : "0"});
    switch (reply.integer()) {
        case 3:
            ++result.uncounted;
            [[fallthrough]];
        case 1:
            ++result.requeued;
            increment(outcome_counters().orphans_recovered);
            break;
        case 2:
            ++result.dead;
            increment(outcome_counters().poison_pills);
            increment(outcome_counters().dead);
            rt_.log.error("queue={} job sent to the dead set: {}: {}", queue, message, payload);
            break;
        case 4:
            return false;  // its owner is alive
        default:
            break;  // already moved by someone else
    }
    return true;
}

void OrphanRecovery::return_own_lists() {
    redis::Connection conn(
        named_connection(rt_.connection_options, rt_.identity, "return-working-lists"));
    for (int attempt = 0; attempt < 5; ++attempt) {
        try {
            Result r;
            redis::Command srem{"SREM", rt_.keys.working_lists()};
            for (const auto& [queue, list] : fetcher_.working_lists()) {
                recover_list(conn, list, queue, fetcher_.identity(), false, r);
                srem.push_back(list);
            }
            conn.pipeline({srem,
                           {"DEL", rt_.keys.alive(fetcher_.identity()),
                            fetcher_.started_key(fetcher_.identity())}});
            if (r.requeued > 0)
                rt_.log.warn("reliable fetch: returned {} leftover job(s) to their queues",
                             r.requeued);
            return;
        } catch (const redis::Error& e) {
            rt_.log.warn("reliable fetch: could not unregister ({}); retrying", e.what());
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
    }
    rt_.log.error(
        "reliable fetch: giving up unregistering; orphan recovery will return any "
        "leftover jobs once the liveness key expires");
}

void OrphanRecovery::stop(bool clean) noexcept {
    if (stopped_.exchange(true)) return;
    worker_.stop();
    liveness_.stop();
    acks_.stop();   // its last flush: no finished job among the lists returned below
    conn_.reset();  // the connections close with the threads
    liveness_conn_.reset();
    if (clean) return_own_lists();
}

}  // namespace kiqd
