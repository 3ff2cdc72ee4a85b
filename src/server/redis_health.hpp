#pragma once
// RedisHealth: turns many threads' Redis errors into one log line per outage and one line on
// recovery with the downtime, however many threads noticed; and the same for a window in which
// Redis answers but refuses writes (OOM under maxmemory with noeviction, MISCONF after a failed
// save, READONLY from a replica, NOREPLICAS): one line when the refusals start, one when a write
// is accepted again, with the window's length and the jobs waiting in the queues. A refusal is not
// an outage: reads go on, and a read that succeeds says nothing about writes, so only a write
// that succeeded (wrote()) ends a refusal window, or logs that Redis is back after an outage
// (a read only clears down()).
// Orphan recovery asks writes_refused_within(): a refusal stops every process's liveness
// refreshes, so a key that lapsed in one is no sign of death (orphan_recovery.hpp).
// Thread-safe.
// Two things would otherwise make a restart mid-run flap (unreachable, back, unreachable, back):
// a command that started before the outage was noticed and still got its reply proves nothing
// about recovery, so succeeded(started) ignores it; and a connection left idle during the outage
// (heartbeat, scheduler) fails once at its next use after Redis is back, then reconnects, so a
// failure within kSettle of a recovery is logged at debug level and does not open an outage (a
// real one still does, at the first failure after kSettle; the retries never stop meanwhile).
#include <spdlog/logger.h>

#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace kiqd {

class RedisHealth {
  public:
    explicit RedisHealth(spdlog::logger& log) : log_(log) {}
    using Clock = std::chrono::steady_clock;
    static constexpr std::chrono::seconds kSettle{10};

    // Whether a Redis error reply is a refused write: OOM, MISCONF, READONLY, NOREPLICAS (also
    // inside a script's error, and a transaction's EXECABORT that names one).
    static bool is_refusal(std::string_view error);

    // An error: a refusal (is_refusal of its text) opens or continues a refusal window, anything
    // else an outage.
    void failed(const std::exception& e);
    // A command answered. `started`: when it was sent.
    void succeeded(Clock::time_point started);
    // What an accepted write proves. Under maxmemory with noeviction Redis still takes the
    // writes that cannot grow its memory (LREM, DEL, EXPIRE, PEXPIRE, and a script whose first
    // write is one of those), so only a write that could grow it (SET, SADD, HSET, a fetch's
    // move) ends a refusal window; any write ends an outage.
    enum class Write { any, grows };
    // A write was accepted (sent at `started`): logs the end of an outage, and with
    // Write::grows ends a refusal window.
    void wrote(Clock::time_point started, Write kind = Write::grows);
    bool down() const;
    // Whether writes are refused now, or were within `window` (counted from the first accepted
    // write after the refusals).
    bool writes_refused_within(Clock::duration window) const;
    bool refusing() const;
    // How many refusal windows have ended (for tests and metrics).
    unsigned long refusal_windows() const;
    // Counts the jobs waiting in this process's queues for the end-of-refusal line (called
    // without the lock, on the thread whose write ended the window; nullopt: unknown). Set once,
    // before the threads start.
    void set_waiting_jobs(std::function<std::optional<long long>()> count) {
        waiting_jobs_ = std::move(count);
    }

  private:
    spdlog::logger& log_;
    mutable std::mutex mutex_;
    bool down_ = false;
    bool back_unlogged_ = false;             // reachable again, no write seen yet
    Clock::time_point since_;                // when the current (or last) outage was noticed
    std::optional<Clock::time_point> back_;  // when the last one ended
    bool refusing_ = false;
    Clock::time_point refused_since_;                 // the current window's first refusal
    unsigned long refused_ = 0;                       // refusals in the current window
    std::optional<Clock::time_point> refusal_ended_;  // the last window's first accepted write
    unsigned long windows_ = 0;
    std::function<std::optional<long long>()> waiting_jobs_;
};

}  // namespace kiqd
