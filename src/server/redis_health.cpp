#include "server/redis_health.hpp"

namespace kiqd {

void RedisHealth::failed(const std::exception& e) {
    std::lock_guard lock(mutex_);
    if (down_) return;
    down_ = true;
    since_ = std::chrono::steady_clock::now();
    log_.error("Redis is unreachable, retrying with backoff: {}", e.what());
}

void RedisHealth::succeeded() {
    std::lock_guard lock(mutex_);
    if (!down_) return;
    down_ = false;
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - since_;
    log_.warn("Redis is back after {:.1f} s", d.count());
}

bool RedisHealth::down() const {
    std::lock_guard lock(mutex_);
    return down_;
}

}  // namespace kiqd
