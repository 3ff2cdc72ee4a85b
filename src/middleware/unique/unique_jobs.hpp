#pragma once
// Unique jobs: a server middleware that enforces sidekiq-unique-jobs' lock types from the
// server side (docs/data-model.md#unique-jobs-keys). A job's identity is its `lock_digest` when the
// producer computed one (the Ruby gem's client does), else the gem's own digest: "uniquejobs:" +
// MD5 of the JSON of the sorted [key, value] pairs of {class, queue, lock_args}.
//
// until_and_while_executing — two keys per identity, <digest>:WAIT and <digest>:EXEC:
//   * a starting copy that finds a *different* copy holding WAIT is a duplicate → on_conflict
//     (default `log`: dropped with a log line — safe, because the waiting copy starts later);
//   * otherwise it takes EXEC (SET NX PX lock_ttl) and, if it held WAIT, releases it, and runs;
//   * if EXEC is busy it takes (or keeps) WAIT with a random token and is parked in `schedule`
//     `wait_interval` ahead with the token in its payload (`lock_wait_token`), so it never
//     holds a worker thread; when it comes back it tries again as the WAIT holder.
//   So at most one copy runs, at most one waits, and every copy enqueued while one runs is
//   followed by a run that starts after it. Each step is one Lua script (one round trip), the
//   release another; a lock is only released by the holder of its random token.
// while_executing — only EXEC around the run; a copy that finds it busy waits (parked as above)
//   up to `lock_timeout` (default 0: no wait) and then goes to on_conflict (default `reject`:
//   the dead set, with the reason).
// until_executing / until_executed / until_expired — locks a *client* takes at push time. kiqd
//   releases the gem's client lock (<digest>, <digest>:LOCKED, …) for this jid at the moment
//   the gem's server would: before the run, after the run (also after a failure), never.
//   kiqd does not take client locks itself (its C++ client has no unique middleware yet).
// EXEC locks carry a TTL and are extended while the job runs by the LockKeeper
// (lock_keeper.hpp), which also reaps locks of processes that died.
//
// One instance is shared by all processor threads; per-job state lives on the stack.
#include <chrono>
#include <optional>
#include <string>

#include "job/dead_set.hpp"
#include "kiqd/config.hpp"
#include "kiqd/middleware_chain.hpp"
#include "kiqd/redis/script.hpp"
#include "middleware/unique/lock_keeper.hpp"

namespace kiqd {

// The lock a job asks for, resolved from its payload and its class's YAML defaults.
struct LockSpec {
    std::string type;    // canonical: until_and_while_executing, while_executing, ...
    std::string digest;  // the identity, e.g. "uniquejobs:51379b77…"
    std::chrono::milliseconds ttl{60000};
    std::optional<std::chrono::milliseconds> timeout;  // nullopt: wait as long as it takes
    std::string on_conflict;                           // reject | reschedule | log
    bool client_lock = false;  // the payload carries a producer's lock_digest: release the
                               // gem's client lock for this jid when the gem would
};

// nullopt when the job asks for no lock. Throws JobError ("Kiqd::InvalidLock") for lock
// options of the wrong type or unknown values.
std::optional<LockSpec> resolve_lock(const Job& job, const ClassSpec* defaults,
                                     const UniqueJobsConfig& config);

// sidekiq-unique-jobs' digest (LockDigest: MD5 of JSON.generate of the sorted pairs of
// apartment, class, lock_args, queue); null class/queue are left out (unique_across_workers /
// unique_across_queues), apartment only when the payload has one. `lock_args` and `apartment`
// are JSON texts already written as Ruby writes them (ruby_json.hpp).
std::string unique_digest(const std::string& prefix, const std::string* job_class,
                          const std::string* queue, const std::string& lock_args,
                          const std::optional<std::string>& apartment = std::nullopt);

class UniqueJobsMiddleware final : public ServerMiddleware {
  public:
    UniqueJobsMiddleware(const Config& config, const Keys& keys, const DeadSet& dead,
                         LockKeeper& keeper, std::string identity);
    std::string_view name() const override { return "unique_jobs"; }
    void call(JobContext& ctx, const Next& next) const override;

  private:
    void run_with_exec_lock(JobContext& ctx, const Next& next, const LockSpec& lock) const;
    void release_client_lock(JobContext& ctx, const LockSpec& lock) const;
    void park(JobContext& ctx, const LockSpec& lock, const std::string& wait_token,
              double since) const;
    void conflict(JobContext& ctx, const LockSpec& lock, const std::string& why) const;
    std::vector<std::string> client_lock_keys(const std::string& digest) const;

    const Config& config_;
    const Keys& keys_;
    const DeadSet& dead_;
    LockKeeper& keeper_;
    std::string identity_;
    redis::Script acquire_script_;
    redis::Script client_unlock_script_;
    redis::Script release_script_;
    redis::Script drop_wait_script_;
};

}  // namespace kiqd
