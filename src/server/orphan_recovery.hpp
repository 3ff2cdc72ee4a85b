#pragma once
// OrphanRecovery: the other half of reliable fetch. Two threads, each with its own connection:
//  * the liveness thread registers this process's working lists in the `kiqd:reliable:working`
//    set and keeps the liveness key `kiqd:reliable:alive:<identity>` alive (PEXPIRE, which
//    Redis takes even out of memory, or SET PX NX when it is missing; every third of
//    liveness_ttl), then lets the processors fetch (ReliableFetcher::set_ready). It does
//    nothing else, so that no recovery pass, however long, can delay a refresh and get this
//    live process's jobs recovered by its peers. Once writes work again after Redis refused
//    them, it records so for the fleet (`kiqd:reliable:writes-refused`, PX liveness_ttl);
//  * the recovery thread does the rest:
//  * at start and then every orphan_check_interval, unless writes were refused within the last
//    liveness_ttl (seen here or recorded by another process: a refusal stops every process's
//    refreshes, so a lapsed key then is no sign of death), if it wins the cluster-wide lock
//    (SET NX PX interval, so one recovery per interval for the whole fleet), puts the jobs of
//    every working list whose owner's liveness key has expired back at the front of their
//    queues. Each job moves in one Lua script (LREM from the working list, and only if that won,
//    RPUSH onto the queue), so two recoveries never requeue the same job twice and a crash in
//    the middle loses nothing. A job a dying process interrupted max_interruptions times goes to
//    the dead set instead (poison-pill guard; the count lives in a hash keyed by jid, so the
//    payload itself is never rewritten). Only interruptions of jobs known to have started count:
//    every job of a process that fetched one at a time; of a batching process, which also holds
//    jobs that never started (its fetch buffer) and finished ones awaiting their deferred
//    acknowledgement, only those in its started set (`kiqd:reliable:started:<identity>`, which
//    has an empty member from its first liveness round on). Every requeued job becomes a suspect
//    (`kiqd:reliable:suspects`), whose next start a batched fetch records (reliable_fetcher.hpp).
//    A list whose owner comes back in the middle (its key set again: a stall or an outage
//    ended) is left to it from that job on: the requeue script checks the key (the owner's
//    half of that handshake is ownership_fence.hpp).
//  * every round, returns jobs *stranded* in this process's own working lists: a fetch whose
//    reply was lost (Redis moved the job, then the connection dropped) leaves a job there that
//    no processor runs. An entry that no processor has been running for kStrandedAfter (longer
//    than an acknowledgement retried after an outage takes to land) goes back to its queue.
// stop(clean) ends the threads; when every processor thread ended, it also returns anything left
// in this process's working lists and unregisters them. After an unclean stop it leaves them to
// a later recovery, because a stuck thread may still fetch, or still run its job.
#include <atomic>
#include <chrono>
#include <map>
#include <optional>

#include "common/periodic_worker.hpp"
#include "fetch/reliable_fetcher.hpp"
#include "kiqd/redis/script.hpp"
#include "server/ack_flusher.hpp"
#include "server/runtime.hpp"

namespace kiqd {

class OrphanRecovery {
  public:
    OrphanRecovery(Runtime& rt, const ReliableFetcher& fetcher);
    ~OrphanRecovery();
    void start();
    void stop(bool clean) noexcept;  // idempotent

    struct Result {
        size_t lists = 0;      // orphaned working lists emptied
        size_t requeued = 0;   // jobs put back in their queues
        size_t dead = 0;       // jobs sent to the dead set by the poison-pill guard
        size_t uncounted = 0;  // of `requeued`, not known to have started (not counted)
        bool ran = false;      // false: another process holds the recovery lock
    };
    // Registers the working lists and refreshes the liveness key (and a batching process's
    // started set); returns this process's recoveries counter (ownership_fence.hpp). Public for
    // tests.
    long long register_alive(redis::Connection& conn);
    // One recovery pass; `take_lock` false skips the cluster lock (tests). Public for tests.
    Result recover_orphans(redis::Connection& conn, bool take_lock = true);
    // One pass over this process's own working lists; returns the jobs put back. `after` is how
    // long an entry must have been seen without a processor running it. Public for tests.
    static constexpr std::chrono::seconds kStrandedAfter{15};
    size_t return_stranded(redis::Connection& conn,
                           std::chrono::steady_clock::duration after = kStrandedAfter);

  private:
    void keep_alive();  // one round of the liveness thread
    void round();       // one round of the recovery thread
    // Moves every job of one working list (of the process `owner`) back to `queue`. `orphan`:
    // another process's list, so the poison-pill guard applies and each job moves only while
    // the owner's liveness key is missing (false for this process's own leftovers at a clean
    // stop). Returns false when it stopped because the owner is alive again.
    bool recover_list(redis::Connection& conn, const std::string& list, const std::string& queue,
                      const std::string& owner, bool orphan, Result& result);
    // Moves one job from `list` back to `queue` (the poison-pill count applies when `max` > 0;
    // `only_if_dead`: only while the owner's liveness key is missing). False: the owner is
    // alive, nothing moved.
    bool requeue_one(redis::Connection& conn, const std::string& list, const std::string& queue,
                     const std::string& owner, const std::string& payload, int max,
                     bool only_if_dead, Result& result);
    void return_own_lists();
    // The key a process sets (PX its liveness_ttl) once writes work again after refusals.
    std::string refusal_key() const;
    // Whether a recovery pass must wait: writes were refused within the last liveness_ttl, as
    // this process saw or another recorded (register_alive). Recovery thread only.
    bool writes_refused_lately(redis::Connection& conn);

    Runtime& rt_;
    const ReliableFetcher& fetcher_;
    redis::Script requeue_script_;
    std::atomic<bool> stopped_{false};
    std::optional<redis::Connection> conn_;           // recovery thread, start() to stop()
    std::optional<redis::Connection> liveness_conn_;  // liveness thread, start() to stop()
    DueTime next_check_;                              // recovery thread only
    uint64_t dropped_logged_ = 0;         // fence drops already logged (liveness thread only)
    bool registered_ = false;             // liveness thread: the working lists' SADD went through
    unsigned long recorded_windows_ = 0;  // liveness thread: refusal windows recorded in Redis
    bool waiting_logged_ = false;         // recovery thread: the wait after refusals is logged
    // (working list, payload) → when it was first seen with no processor running it.
    std::map<std::pair<std::string, std::string>, std::chrono::steady_clock::time_point>
        suspects_;  // recovery thread only
    // Sends batched fetch's deferred acknowledgements that waited too long (ack_flusher.hpp);
    // stopped before this process's working lists are returned at a clean stop.
    AckFlusher acks_;
    // Last: their threads end before the members they use go.
    PeriodicWorker liveness_;
    PeriodicWorker worker_;
};

}  // namespace kiqd
