#pragma once
// RedisHealth: turns many threads' Redis errors into one log line per outage and one line on
// recovery with the downtime, however many threads noticed. Thread-safe.
#include <spdlog/logger.h>

#include <chrono>
#include <exception>
#include <mutex>

namespace kiqd {

class RedisHealth {
  public:
    explicit RedisHealth(spdlog::logger& log) : log_(log) {}
    void failed(const std::exception& e);
    void succeeded();
    bool down() const;

  private:
    spdlog::logger& log_;
    mutable std::mutex mutex_;
    bool down_ = false;
    std::chrono::steady_clock::time_point since_;
};

}  // namespace kiqd
