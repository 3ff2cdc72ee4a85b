#pragma once
// RedisHealth: turns many threads' Redis errors into one log line per outage and one line on
// recovery with the downtime, however many threads noticed. Thread-safe.
// Two things would otherwise make a restart mid-run flap (unreachable, back, unreachable, back):
// a command that started before the outage was noticed and still got its reply proves nothing
// about recovery, so succeeded(started) ignores it; and a connection left idle during the outage
// (heartbeat, scheduler) fails once at its next use after Redis is back, then reconnects, so a
// failure within kSettle of a recovery is logged at debug level and does not open an outage (a
// real one still does, at the first failure after kSettle; the retries never stop meanwhile).
#include <spdlog/logger.h>

#include <chrono>
#include <exception>
#include <mutex>
#include <optional>

namespace kiqd {

class RedisHealth {
  public:
    explicit RedisHealth(spdlog::logger& log) : log_(log) {}
    using Clock = std::chrono::steady_clock;
    static constexpr std::chrono::seconds kSettle{10};

    void failed(const std::exception& e);
    // `started`: when the command that succeeded was sent.
    void succeeded(Clock::time_point started);
    bool down() const;

  private:
    spdlog::logger& log_;
    mutable std::mutex mutex_;
    bool down_ = false;
    Clock::time_point since_;                // when the current outage was noticed
    std::optional<Clock::time_point> back_;  // when the last one ended
};

}  // namespace kiqd
