#pragma once
// OwnershipFence: whether this process still owns the jobs in its reliable-fetch working lists.
// A process owns them while its liveness key (`kiqd:reliable:alive:<identity>`) lives. If it
// stalls (SIGSTOP, a VM pause, swap) or cannot reach Redis for longer than liveness_ttl, the key
// may lapse, and another process's orphan recovery may put its jobs back in their queues, where
// any process takes them. A job fetched before such a lapse and not started yet must then not
// run here: the recovering process's copy owns it. So before a job starts, the processor asks
// holds(): true when the job was fetched after the last moment the key may have been missing,
// and the key is known to live now (no round trip: two atomic loads). Otherwise prove() checks
// in one script that the job is still in this process's working list, renewing the liveness key
// and the list's registration in the same step; orphan recovery's requeue script skips a list
// whose owner's key lives (orphan_recovery.cpp), so after a successful proof no recovery can
// take the job, and a failed one means a recovery already did: the job is dropped, not run.
//
// What "known to live" rests on: a refresh sent at time s sets the key in Redis at some moment
// p >= s, so it lives until at least s + ttl; the key may have been missing only between the
// previous refresh's s + ttl and the reply of the next one. Times are this process's monotonic
// clock (steady_clock), which goes on while the process is stopped.
// Threads: renewed() by the liveness thread (orphan_recovery.hpp) and by processors after a
// proof (serialised by a mutex); holds() and prove() by processors (lock-free reads).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kiqd/redis/connection.hpp"
#include "kiqd/redis/script.hpp"

namespace kiqd {

class OwnershipFence {
  public:
    using Clock = std::chrono::steady_clock;

    OwnershipFence();

    // A liveness refresh (SET PX `ttl`) sent at `sent` whose reply came at `replied`, which also
    // read `recoveries`: how many of this process's jobs other processes' recoveries have moved.
    void renewed(Clock::time_point sent, Clock::time_point replied, std::chrono::milliseconds ttl,
                 long long recoveries);
    // Whether a job fetched at `fetched_at` (when its fetch was sent) is still this process's
    // without asking Redis: the key cannot have lapsed since, and lives now. Always true before
    // the first renewed() (a fetcher without a liveness thread has no key to lose); a daemon's
    // processors fetch only after it.
    bool holds(Clock::time_point fetched_at) const;
    // Proves in one script that the job `payload`, fetched at `fetched_at`, is still this
    // process's: it is in `working_list`, and no recovery moved any of this process's jobs
    // (`recoveries_key`, a counter the recovery script increments) after it was fetched. The
    // second half matters because the process may fetch the very job again once a recovery put
    // it back in its queue: the same payload is then in the list, for the new fetch. The script
    // renews the liveness key `alive_key` and registers the list in `registry`
    // (orphan_recovery.hpp) at the same time. `pending` (idempotent commands of the previous
    // job) goes out in the same write. False: the job is not known to be this process's; it is
    // dropped (if it is still in the working list after all, the stranded-job check returns it
    // to its queue). Throws redis::Error.
    bool prove(redis::Connection& conn, std::vector<redis::Command>& pending,
               const std::string& alive_key, const std::string& registry,
               const std::string& working_list, const std::string& recoveries_key,
               const std::string& payload, Clock::time_point fetched_at);
    // Jobs dropped so far because prove() found them gone.
    uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
    void count_dropped() { dropped_.fetch_add(1, std::memory_order_relaxed); }

  private:
    static int64_t ticks(Clock::time_point t) { return t.time_since_epoch().count(); }
    // A read of the recoveries counter at `seen` (renew_mutex_ held).
    void observe_recoveries(long long recoveries, Clock::time_point seen);

    redis::Script prove_script_;
    std::mutex renew_mutex_;  // renewed() only
    // Clock ticks: the key lives at least until alive_until_; it may have been missing until
    // gap_end_ (the reply of the refresh after the last possible lapse). Before the first
    // refresh: no fence (ttl_ms_ 0).
    std::atomic<int64_t> alive_until_{0};
    std::atomic<int64_t> gap_end_{0};
    std::atomic<int64_t> ttl_ms_{0};
    // The recoveries counter as last read (-1: never), and when it was last seen to change: a
    // job fetched before that may have been recovered.
    long long recoveries_ = -1;  // renew_mutex_
    std::atomic<int64_t> recovered_seen_{0};
    std::atomic<uint64_t> dropped_{0};
};

}  // namespace kiqd
