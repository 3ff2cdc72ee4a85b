#pragma once
// PeriodicWorker: the thread of a background component that works in rounds — the scheduler's
// poll, the unique-lock and concurrency-slot keepers, the pause controller, orphan recovery.
// It owns the thread (named after the component), the mutex and condition variable the thread
// sleeps on between rounds, and the stop and wake flags. The component owns what a round does
// and how long the wait after each round is: fixed, or drawn anew each time (the scheduler's
// randomised poll interval).
//
// A component catches the errors it expects inside its round (a Redis outage, with its own log
// line); a round that still throws is logged here at error and the next round follows after the
// usual wait, so no error ends the thread.
//
// start() and stop() are called by the owner (its start/stop and destructor); wake() from any
// thread; rounds run only on the worker thread. It lives in common/ because it depends on
// nothing of kiqd, and both server/ and middleware/ components are built on it.
#include <spdlog/logger.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "kiqd/deadline.hpp"

namespace kiqd {

class PeriodicWorker {
  public:
    using Duration = std::chrono::steady_clock::duration;
    using Round = std::function<void()>;
    // The wait after a round, asked after each one (on the worker thread). Must not throw.
    using Interval = std::function<Duration()>;

    // `name` names the thread (the first 15 characters) and the log line of a failed round.
    PeriodicWorker(std::string name, spdlog::logger& log);
    ~PeriodicWorker();  // stop()
    PeriodicWorker(const PeriodicWorker&) = delete;
    PeriodicWorker& operator=(const PeriodicWorker&) = delete;

    // Starts the thread: it waits `first_wait`, runs `round`, waits `interval`, runs `round`
    // again, and so on until stop(). With a zero first_wait the first round runs even when
    // stop() came before the thread got going, so a component that must do something once
    // (orphan recovery registers the process the fetchers wait for) always does. Once only;
    // after stop() it starts nothing.
    void start(Duration first_wait, Interval interval, Round round);
    void start(Duration first_wait, Duration interval, Round round);
    // Cuts the current wait short: the next round runs at once, or right after the running one.
    void wake();
    // Idempotent. Ends the wait, lets a running round finish and joins the thread. True for the
    // call that ended the thread; false when it never started or an earlier call ended it.
    bool stop() noexcept;

  private:
    void run(Duration first_wait) noexcept;
    void run_round() noexcept;
    // Sleeps for `d`, or until woken or stopped; false once stop() was called.
    bool sleep(Duration d);

    const std::string name_;
    spdlog::logger& log_;
    Round round_;        // set before the thread starts, then worker thread only
    Interval interval_;  // likewise
    std::mutex mutex_;
    std::condition_variable cv_;
    bool stop_ = false;   // guarded by mutex_
    bool woken_ = false;  // guarded by mutex_
    std::thread thread_;
};

// When a slower duty inside a worker's rounds is next due ("every reaper_interval, also reap"):
// reached() once its time has come, set_in() schedules the next one counted from now. Used on
// the worker thread only.
class DueTime {
  public:
    DueTime() = default;  // due at once
    explicit DueTime(PeriodicWorker::Duration in) { set_in(in); }
    bool reached() const { return std::chrono::steady_clock::now() >= at_; }
    void set_in(PeriodicWorker::Duration in) { at_ = deadline_in(in); }

  private:
    std::chrono::steady_clock::time_point at_{};
};

}  // namespace kiqd
