#include "server/redis_health.hpp"

#include "kiqd/redis/errors.hpp"

namespace kiqd {
namespace {

bool starts_with(std::string_view text, std::string_view prefix) {
    return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

bool RedisHealth::is_refusal(std::string_view error) {
    // Redis's own error codes for a write it will not take; inside a script or a transaction
    // they come after the script's or EXECABORT's words, so they are looked for as words too.
    for (std::string_view code : {"OOM ", "MISCONF ", "READONLY ", "NOREPLICAS "})
        if (starts_with(error, code) || error.find(" " + std::string(code)) != std::string::npos ||
            error.find("-" + std::string(code)) != std::string::npos)
            return true;
    return false;
}

void RedisHealth::failed(const std::exception& e) {
    const bool reply = dynamic_cast<const redis::ReplyError*>(&e) != nullptr;
    if (reply && is_refusal(e.what())) {
        std::lock_guard lock(mutex_);
        ++refused_;
        if (refusing_) return;
        refusing_ = true;
        refused_since_ = Clock::now();
        refused_ = 1;
        log_.error(
            "Redis refuses writes, retrying with backoff (jobs wait in their queues; liveness "
            "keys are renewed where Redis allows it): {}",
            e.what());
        return;
    }
    std::lock_guard lock(mutex_);
    if (down_) return;
    const auto now = Clock::now();
    if (back_ && now - *back_ < kSettle) {
        log_.debug("a Redis connection from before the last outage failed, reconnecting: {}",
                   e.what());
        return;
    }
    down_ = true;
    back_unlogged_ = false;
    since_ = now;
    log_.error("Redis is unreachable, retrying with backoff: {}", e.what());
}

void RedisHealth::succeeded(Clock::time_point started) {
    std::lock_guard lock(mutex_);
    if (!down_ || started < since_) return;
    // Reachable again; "back" is said once a write is accepted too (wrote()).
    down_ = false;
    back_unlogged_ = true;
    back_ = Clock::now();
}

void RedisHealth::wrote(Clock::time_point started, Write kind) {
    succeeded(started);
    std::unique_lock lock(mutex_);
    if (back_unlogged_ && started >= since_) {
        back_unlogged_ = false;
        const std::chrono::duration<double> d = Clock::now() - since_;
        log_.warn("Redis is back after {:.1f} s", d.count());
    }
    if (!refusing_ || kind != Write::grows || started < refused_since_) return;
    refusing_ = false;
    const auto now = Clock::now();
    refusal_ended_ = now;
    ++windows_;
    const std::chrono::duration<double> d = now - refused_since_;
    const unsigned long refused = refused_;
    lock.unlock();
    // Outside the lock: a round trip of its own.
    std::optional<long long> waiting;
    if (waiting_jobs_) {
        try {
            waiting = waiting_jobs_();
        } catch (const std::exception&) {
            waiting.reset();
        }
    }
    if (waiting)
        log_.warn(
            "Redis accepts writes again after {:.1f} s of refusals ({} refused); {} job(s) "
            "waiting in this process's queues",
            d.count(), refused, *waiting);
    else
        log_.warn("Redis accepts writes again after {:.1f} s of refusals ({} refused)", d.count(),
                  refused);
}

bool RedisHealth::down() const {
    std::lock_guard lock(mutex_);
    return down_;
}

bool RedisHealth::refusing() const {
    std::lock_guard lock(mutex_);
    return refusing_;
}

bool RedisHealth::writes_refused_within(Clock::duration window) const {
    std::lock_guard lock(mutex_);
    return refusing_ || (refusal_ended_ && Clock::now() - *refusal_ended_ < window);
}

unsigned long RedisHealth::refusal_windows() const {
    std::lock_guard lock(mutex_);
    return windows_;
}

}  // namespace kiqd
