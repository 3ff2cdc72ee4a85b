#pragma once
// Manager: owns the N processor threads. start(); quiet() stops fetching (running jobs finish);
// stop(deadline) quiets and waits for the processors until the deadline — which a second
// SIGTERM may move to "now". Then comes the hard shutdown, in this order so that no job ever
// runs in two places at once:
//   1. jobs that never started (the fetch buffer, cpu-bound jobs waiting for a slot) go back to
//      the front of their queues;
//   2. the cooperative stop signal is raised: exec commands get SIGTERM and, after a 2 s grace,
//      SIGKILL; in-process handlers are expected to return or throw Interrupted;
//   3. each processor whose handler returned records the outcome itself: a job that finished
//      within the grace is acknowledged, an interrupted one is pushed back to its queue — only
//      now that nothing runs it any more;
//   4. threads still in handler code a second after the grace (in-process code that ignores the
//      stop signal; a thread cannot be killed) are given up: their jobs are taken here and, with
//      basic fetch, pushed back by requeue_stuck_jobs() as the process's very last step before
//      it exits (their threads die with it); with reliable fetch they stay in the working list
//      and orphan recovery returns them once this process's liveness key has expired.
// Sidekiq instead pushes every running job back first and then raises Shutdown in the threads,
// so a job can start elsewhere while its first run still goes on.
// With Sidekiq 7's capsules the processors are grouped: each capsule's threads fetch through the
// capsule's own fetcher (its Runtime), and hold WorkState slots of their own; quiet, stop and
// the requeues above cover every capsule at once.
// Called from the launcher's shutdown thread; processors report their exit through a callback.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "server/processor.hpp"

namespace kiqd {

class Manager {
  public:
    using Clock = std::chrono::steady_clock;
    // One capsule's processor threads: `rt` is the process's Runtime with the capsule's fetcher;
    // its threads hold WorkState slots first_slot..first_slot+threads-1.
    struct CapsuleThreads {
        Runtime* rt;
        size_t first_slot;
        size_t threads;
    };
    explicit Manager(Runtime& rt);  // one capsule: every slot of rt.work, rt.fetcher
    Manager(Runtime& rt, const std::vector<CapsuleThreads>& capsules);
    ~Manager();

    void start();
    void quiet() noexcept;
    // Returns true when every processor thread ended; false when some are stuck in handler code
    // (their jobs are then held for requeue_stuck_jobs).
    bool stop(const std::function<Clock::time_point()>& deadline);
    // After stop() returned false, right before the process exits: kills any exec command still
    // running, then pushes the stuck jobs back to their queues (basic fetch) or leaves them to
    // orphan recovery (reliable fetch).
    void requeue_stuck_jobs();
    size_t alive() const;  // processor threads still in their loop (any thread)

  private:
    bool wait_all_until(Clock::time_point until, const std::function<Clock::time_point()>* moving);
    size_t requeue_unstarted_jobs();
    // Pipelines `commands`, retrying for a few seconds; false when Redis never took them.
    bool write_at_shutdown(const std::vector<redis::Command>& commands);

    Runtime& rt_;
    std::vector<const Fetcher*> fetchers_;  // one per capsule; rt_.fetcher is the first
    std::vector<std::unique_ptr<Processor>> processors_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    size_t alive_ = 0;               // guarded by mutex_
    std::vector<RunningJob> stuck_;  // shutdown thread only
};

}  // namespace kiqd
