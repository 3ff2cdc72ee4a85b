#pragma once
// Manager: owns the N processor threads. start(); quiet() stops fetching (running jobs finish);
// stop(deadline) quiets, waits for the processors until the deadline — which a second SIGTERM
// may move to "now" — and then does Sidekiq's hard shutdown: it pushes every still-running job
// back to the front of its queue *before* giving up on the threads (running a job twice is
// better than losing it), raises the cooperative stop signal, and waits up to 3 s more.
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
    explicit Manager(Runtime& rt);
    ~Manager();

    void start();
    void quiet() noexcept;
    // Returns true when every processor thread ended; false when some are stuck in handler code
    // (their jobs are already requeued; the process may then exit without them).
    bool stop(const std::function<Clock::time_point()>& deadline);
    size_t requeued() const { return requeued_; }
    size_t alive() const;  // processor threads still in their loop (any thread)

  private:
    bool wait_all_until(Clock::time_point until, const std::function<Clock::time_point()>* moving);
    void requeue_running_jobs();

    Runtime& rt_;
    std::vector<std::unique_ptr<Processor>> processors_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    size_t alive_ = 0;  // guarded by mutex_
    size_t requeued_ = 0;
};

}  // namespace kiqd
