#pragma once
// PauseController: the pause-control thread of one kiqd process (see pause_control.hpp).
//  * Every refresh_interval (0.5 s) it reads the paused queues and the operator-paused worker
//    classes from Redis, asks each configured class's strategy (pause_strategy.hpp), and
//    publishes the result: the PauseState the middleware reads, and the paused flags of the
//    QueueOrder every fetch uses. So a pause reaches every process within refresh_interval,
//    and a change is logged once, at info.
//  * Every resume_interval (5 s), if it holds the fleet-wide resume lock (one process at a
//    time; the holder extends it, it expires 3 intervals after its holder died), it moves the
//    parked jobs of every class that is no longer paused back to their queues, batch_size per
//    class and round, each batch atomically (ParkedJobs::resume_batch). While jobs remain the
//    next round follows after at most 1 s, as GitLab's ResumeWorker reschedules itself.
// A class this process has no strategy for is judged by the descriptor stored with its parked
// jobs; one with a custom strategy this process does not know stays parked for a process that
// does. The thread (a PeriodicWorker) owns its connection; stop() joins it.
#include <chrono>
#include <optional>

#include "common/periodic_worker.hpp"
#include "fetch/queue_order.hpp"
#include "kiqd/redis/script.hpp"
#include "middleware/pause/pause_control.hpp"
#include "server/runtime.hpp"

namespace kiqd {

class PauseController {
  public:
    PauseController(Runtime& rt, PauseState& state, QueueOrder& order, const ParkedJobs& parked,
                    const PauseStrategies& strategies);
    ~PauseController();
    // One synchronous refresh before the processors start, so that a process starting while a
    // worker or queue is paused never runs one of its jobs. Logs and carries on when Redis is
    // not reachable yet (the thread retries).
    void refresh_before_start() noexcept;
    // Another capsule's queue order (launcher.hpp) whose configured queues pause as `order`'s;
    // before start().
    void also_pause(QueueOrder& order) { more_orders_.push_back(&order); }
    void start();
    void stop() noexcept;  // idempotent; joins the thread and gives up the resume lock

    // Public for tests: one refresh (true when the paused set changed), and one resume round
    // (-1 when another process holds the lock, else how many jobs moved; `remaining` tells
    // whether any resumable class still has parked jobs).
    bool refresh(redis::Connection& conn);
    long long resume_round(redis::Connection& conn, bool* remaining = nullptr);

  private:
    void round();  // one round of the controller thread
    bool still_paused(redis::Connection& conn, const PausedSet& paused,
                      const std::string& job_class, const std::string& descriptor) const;

    Runtime& rt_;
    PauseState& state_;
    QueueOrder& order_;
    std::vector<QueueOrder*> more_orders_;  // the other capsules' (launcher.hpp)
    const ParkedJobs& parked_;
    const PauseStrategies& strategies_;
    redis::Script lock_script_;
    std::optional<redis::Connection> conn_;  // controller thread only, from start() to stop()
    DueTime next_resume_;                    // controller thread only
    PeriodicWorker worker_;                  // last: its thread ends before the members it uses go
};

}  // namespace kiqd
