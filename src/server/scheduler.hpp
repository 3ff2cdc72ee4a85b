#pragma once
// Scheduler (Sidekiq's Scheduled::Poller): moves due jobs from "retry", then "schedule", into
// their queues. Due members are read in batches of 100; each one is moved by a Lua script that
// ZREMs it and — only if this process won the ZREM — SADDs queues and LPUSHes it with a fresh
// enqueued_at, in one atomic step, so a crash never loses a job between the two and two
// processes never enqueue the same one twice (Sidekiq pops and pushes in two round trips).
// A member that is not a JSON object moves to "dead" the same way. Runs on its own thread (a
// PeriodicWorker) at Sidekiq's randomised interval, which grows with the process count.
#include <memory>
#include <random>

#include "common/periodic_worker.hpp"
#include "kiqd/redis/script.hpp"
#include "server/runtime.hpp"

namespace kiqd {

// The atomic move from a sorted set (retry, schedule) to a queue: ZREM, and only if that call
// removed the member, SADD queues + LPUSH. Shared with the admin command's `retry`.
extern const char* const kMoveToQueueScript;

class Scheduler {
  public:
    explicit Scheduler(Runtime& rt);
    ~Scheduler();
    void start();
    void stop() noexcept;  // idempotent; joins the thread

    // One pass over both sets; returns how many jobs it moved. Public for tests.
    size_t enqueue_due(redis::Connection& conn, double now);
    // Seconds until the next poll (Sidekiq's random_poll_interval).
    double random_poll_interval(long long process_count);

  private:
    void poll();  // one round of the worker thread

    Runtime& rt_;
    redis::Script move_script_;
    redis::Script kill_script_;
    std::mt19937_64 rng_;
    std::unique_ptr<redis::Connection> conn_;  // only the scheduler thread uses it
    bool scripts_loaded_ = false;              // per Scheduler; reset on NOSCRIPT
    long long polls_ = 0;
    long long process_count_ = 1;
    PeriodicWorker worker_;  // last: its thread ends before the members it uses go
};

}  // namespace kiqd
