#include "server/redis_health.hpp"

namespace kiqd {

void RedisHealth::failed(const std::exception& e) {
    std::lock_guard lock(mutex_);
    if (down_) return;
    const auto now = Clock::now();
    if (back_ && now - *back_ < kSettle) {
        log_.debug("a Redis connection from before the last outage failed, reconnecting: {}",
                   e.what());
        return;
    }
    down_ = true;
    since_ = now;
    log_.error("Redis is unreachable, retrying with backoff: {}", e.what());
}

void RedisHealth::succeeded(Clock::time_point started) {
    std::lock_guard lock(mutex_);
    if (!down_ || started < since_) return;
    down_ = false;
    back_ = Clock::now();
    const std::chrono::duration<double> d = *back_ - since_;
    log_.warn("Redis is back after {:.1f} s", d.count());
}

bool RedisHealth::down() const {
    std::lock_guard lock(mutex_);
    return down_;
}

}  // namespace kiqd
