#pragma once
// Unique jobs: a server middleware that does what sidekiq-unique-jobs' SERVER middleware does
// (7.1 and 8.x), on the gem's own client-lock keys (docs/unique-jobs.md has the table per lock
// type). A job's identity is its `lock_digest` when the producer computed one (the gem's client
// does), else the gem's own digest (unique_digest below).
//
// The gem's client lock (<digest>, <digest>:LOCKED, uniquejobs:digests, …; only for payloads
// with a producer's lock_digest) is handled as the gem's server handles it:
//   until_executing            released before the run; re-taken for this jid after a failure
//                              that will be retried (so duplicates stay out while it waits)
//   until_executed             the run needs it: held → run, free → taken, held by another jid →
//                              a duplicate (dropped with a log line: the holder runs later);
//                              released after a successful run, kept through a retry
//   until_expired              as until_executed, never released (it expires)
//   until_and_while_executing  released FIRST (held by another jid → a duplicate, dropped), then
//                              the run lock below (both in one script call, so such a job costs
//                              the calls of kiqd's own lock); re-taken after a failure that will
//                              be retried
// A job whose retries are exhausted loses its identity's client lock (the gem's death handler).
//
// The run lock (until_and_while_executing, while_executing) is kiqd's own, with two keys per
// identity, <digest>:WAIT and <digest>:EXEC:
//   * a starting copy that finds a *different* copy holding WAIT is a duplicate → on_conflict
//     (default `log`: dropped with a log line — safe, because the waiting copy starts later);
//   * otherwise it takes EXEC (SET NX PX lock_ttl) and, if it held WAIT, releases it, and runs;
//   * if EXEC is busy it takes (or keeps) WAIT with a random token and is parked in `schedule`
//     `wait_interval` ahead with the token in its payload (`lock_wait_token`), so it never
//     holds a worker thread; when it comes back it tries again as the WAIT holder.
//   until_and_while_executing waits as long as it takes with lock_timeout nil or 0 (the gem
//   gives up after ~1 s and loses the update), up to N s with lock_timeout N; while_executing
//   waits up to lock_timeout (0: not at all) and then goes to on_conflict (default `reject`:
//   the dead set, with the reason).
// on_conflict: reschedule (the gem's server re-pushes a busy copy through its client, which takes
// the client lock): an until_and_while_executing copy that waits holds the client lock for its
// jid while it waits and releases it when its run starts; a copy that finds another one waiting
// is dropped with a log line; a waiting copy whose lock_timeout ran out goes back to `schedule`
// 5 s later, still holding the lock.
// EXEC locks carry a TTL and are extended while the job runs by the LockKeeper
// (lock_keeper.hpp), which also reaps locks of processes that died.
//
// One instance is shared by all processor threads; per-job state lives on the stack.
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "job/dead_set.hpp"
#include "job/job_retry.hpp"
#include "kiqd/config.hpp"
#include "kiqd/middleware_chain.hpp"
#include "kiqd/redis/script.hpp"
#include "middleware/unique/lock_keeper.hpp"

namespace kiqd {

// The two lock types whose run lock kiqd takes around the job (LockSpec::type).
inline constexpr const char* kUntilAndWhile = "until_and_while_executing";
inline constexpr const char* kWhileExecuting = "while_executing";

// The lock a job asks for, resolved from its payload and its class's YAML defaults.
struct LockSpec {
    std::string type;    // canonical: until_and_while_executing, while_executing, ...
    std::string digest;  // the identity, e.g. "uniquejobs:51379b77…"
    std::chrono::milliseconds ttl{60000};
    std::optional<std::chrono::milliseconds> timeout;  // nullopt: wait as long as it takes
    std::string on_conflict;                           // reject | reschedule | log
    bool client_lock = false;   // the payload carries a producer's lock_digest: handle the
                                // gem's client lock for this jid as the gem's server does
    long long client_pttl = 0;  // the client lock's TTL when kiqd re-takes it (payload lock_ttl
                                // in ms; 0: none, as the gem's default lock_ttl: null)
    long long limit = 1;        // lock_limit: holders a client lock may have
    std::string score;          // the digests ZSET score when re-taken: the payload's `at`
    // A copy that waited for the run lock carries these members (see the top of this file); read
    // with the other options, their types checked where they are used. nullopt: absent.
    std::optional<nlohmann::json> wait_token;  // lock_wait_token
    std::optional<nlohmann::json> wait_since;  // lock_wait_since
};

// nullopt when the job asks for no lock. Throws JobError ("Kiqd::InvalidLock") for lock
// options of the wrong type or unknown values.
std::optional<LockSpec> resolve_lock(const Job& job, const ClassSpec* defaults,
                                     const UniqueJobsConfig& config);

// sidekiq-unique-jobs' digest (LockDigest: MD5 of JSON.generate of the sorted pairs of
// apartment, class, lock_args, queue); null class/queue are left out (unique_across_workers /
// unique_across_queues), apartment only when the payload has one. `lock_args` and `apartment`
// are JSON texts already written as Ruby writes them (ruby_json.hpp). `modern`: SHA3-256 instead
// of MD5 (the gem 8's digest_algorithm: :modern).
std::string unique_digest(const std::string& prefix, const std::string* job_class,
                          const std::string* queue, const std::string& lock_args,
                          const std::optional<std::string>& apartment = std::nullopt,
                          bool modern = false);

// The gem's client lock of `digest`, as its scripts (unique_scripts.cpp, k[1..7]) take the keys:
// D, D:LOCKED, D:QUEUED, D:PRIMED, D:INFO, uniquejobs:digests, uniquejobs:expiring_digests.
std::vector<std::string> client_lock_keys(const Keys& keys, const std::string& digest);
// unique_scripts::kClientLock's arguments: the gem's client lock taken for `jid` as `lock` says.
std::vector<std::string> client_lock_take_args(const LockSpec& lock, const std::string& jid);

class UniqueJobsMiddleware final : public ServerMiddleware {
  public:
    UniqueJobsMiddleware(const Config& config, const Keys& keys, const DeadSet& dead,
                         const JobRetry& retry, LockKeeper& keeper, std::string identity);
    std::string_view name() const override { return "unique_jobs"; }
    void call(JobContext& ctx, const Next& next) const override;

  private:
    void run_with_exec_lock(JobContext& ctx, const Next& next, const LockSpec& lock) const;
    // The gem's client lock of this jid: release (1 freed, 0 nobody held it, -1 another jid
    // holds it), take (1 held by this jid now, 0 another holds it), and what the gem's server
    // (with its death handler) does to it when the job fails.
    long long release_client_lock(JobContext& ctx, const LockSpec& lock) const;
    long long take_client_lock(JobContext& ctx, const LockSpec& lock) const;
    void after_failure(JobContext& ctx, const LockSpec& lock, bool interrupted, bool relock) const;
    void duplicate(JobContext& ctx, const LockSpec& lock) const;
    void park(JobContext& ctx, const LockSpec& lock, const std::string& wait_token,
              double since) const;
    // A copy that cannot run: on_conflict. `another_waits`: another copy holds the wait lock.
    void conflict(JobContext& ctx, const LockSpec& lock, const std::string& why,
                  bool another_waits) const;
    // on_conflict: reschedule — the copy again in `schedule` 5 s ahead; for the gem's
    // until_and_while_executing, holding its client lock, or dropped when another jid holds it.
    void reschedule(JobContext& ctx, const LockSpec& lock, const std::string& why) const;
    // The copy in `schedule` at `at` holding the client lock for its jid (1), or refused because
    // another jid holds it (0; scheduled anyway with `even_if_held`).
    long long schedule_holding(JobContext& ctx, const LockSpec& lock, double at,
                               std::string payload, bool even_if_held) const;

    const Config& config_;
    const Keys& keys_;
    const DeadSet& dead_;
    const JobRetry& retry_;
    LockKeeper& keeper_;
    std::string identity_;
    redis::Script acquire_script_;
    redis::Script acquire_releasing_client_script_;
    redis::Script client_unlock_script_;
    redis::Script client_lock_script_;
    redis::Script release_script_;
    redis::Script drop_wait_script_;
    redis::Script schedule_holding_script_;
};

}  // namespace kiqd
