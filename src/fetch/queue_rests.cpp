#include "fetch/queue_rests.hpp"

#include <algorithm>

namespace kiqd {

void QueueRests::rest(const std::string& queue, Clock::duration for_how_long) {
    const auto until = Clock::now() + for_how_long;
    std::lock_guard lock(mutex_);
    auto& end = until_[queue];
    end = std::max(end, until);
    int64_t latest = latest_.load(std::memory_order_relaxed);
    const int64_t ticks = until.time_since_epoch().count();
    while (latest < ticks && !latest_.compare_exchange_weak(latest, ticks)) {
    }
}

bool QueueRests::any() const {
    const int64_t latest = latest_.load(std::memory_order_relaxed);
    return latest != 0 && Clock::now().time_since_epoch().count() < latest;
}

bool QueueRests::resting(const std::string& queue) const {
    std::lock_guard lock(mutex_);
    auto it = until_.find(queue);
    return it != until_.end() && Clock::now() < it->second;
}

QueueRests& queue_rests() {
    static QueueRests rests;
    return rests;
}

}  // namespace kiqd
