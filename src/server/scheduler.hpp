#pragma once
// Scheduler (Sidekiq's Scheduled::Poller): moves due jobs from "retry", then "schedule", into
// their queues. Due members are read in pages of a few hundred, by score; one Lua script call
// moves a page: it ZREMs each member and — only for those this call removed — LPUSHes them with
// a fresh enqueued_at (set here, every other byte kept) and SADDs their queues, in one atomic
// step, so a crash never loses a job between the two and two processes never enqueue the same
// one twice (Sidekiq pops and pushes each job in two round trips). A page is moved in score
// order; the loop goes on while pages come back full. A member that is not a JSON object moves
// to "dead" (one script call each). A destination key of the wrong type (a queue key holding a
// string, ...) makes the script leave that queue's members where they are, due, and one error
// line names the key until it is fixed. Runs on its own thread (a PeriodicWorker) at Sidekiq's
// randomised interval, which grows with the process count; while one page's round trip runs, a
// short-lived second thread prepares the next (parses it, sets enqueued_at), so that Redis and
// this process work at the same time on a backlog.
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "common/periodic_worker.hpp"
#include "kiqd/redis/script.hpp"
#include "server/runtime.hpp"

namespace kiqd {

// The atomic move from a sorted set (retry, schedule) to a queue: ZREM, and only if that call
// removed the member, SADD queues + LPUSH; a WRONGTYPE error and nothing written when `queues`
// or the queue's key holds another type. Shared with the admin command's `retry`.
extern const char* const kMoveToQueueScript;
// The atomic move from a sorted set to the dead set: ZREM, and only if that removed the member,
// ZADD dead (trims are the caller's); WRONGTYPE and nothing written when `dead` is no ZSET.
// Shared with the admin command's `kill`.
extern const char* const kMoveToDeadScript;
// The scheduler's move of many due members at once (scheduler.cpp has its KEYS and ARGV).
extern const char* const kMoveBatchToQueuesScript;

class Scheduler {
  public:
    explicit Scheduler(Runtime& rt);
    ~Scheduler();
    void start();
    void stop() noexcept;  // idempotent; joins the thread

    // One pass over both sets; returns how many jobs it moved. Members whose move Redis refused
    // (WRONGTYPE) stay, and are logged once per cause. Public for tests.
    size_t enqueue_due(redis::Connection& conn, double now);
    // Seconds until the next poll (Sidekiq's random_poll_interval).
    double random_poll_interval(long long process_count);

  private:
    void poll();  // one round of the worker thread
    // Logs each refusal the pass before did not have (error), and each that is gone (info).
    void report_refusals(const std::map<std::string, size_t>& refused);

    Runtime& rt_;
    redis::Script batch_script_;
    redis::Script kill_script_;
    std::mt19937_64 rng_;
    std::unique_ptr<redis::Connection> conn_;  // only the scheduler thread uses it
    bool scripts_loaded_ = false;              // per Scheduler; reset on NOSCRIPT
    long long polls_ = 0;
    long long process_count_ = 1;
    std::set<std::string> refusing_;  // the WRONGTYPE errors of the last pass
    PeriodicWorker worker_;           // last: its thread ends before the members it uses go
};

}  // namespace kiqd
