#pragma once
// QueueRests: the queues this process leaves out of its fetch for a moment because the app's own
// throttling said their jobs cannot run now (sidekiq-throttled's cooldown, as the app's runner
// reports it with a `throttled` answer: docs/runner-protocol.md). Without it a queue full of
// throttled jobs would be fetched, checked and handed back in a loop. Processor threads set rests
// (the runner handler) and read them on every fetch order (QueueOrder::order); a mutex guards
// the map, and an atomic deadline lets a fetch skip it while nothing rests. One per process.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kiqd {

class QueueRests {
  public:
    using Clock = std::chrono::steady_clock;
    // `queue` is left out of fetches until `for_how_long` from now (a longer rest in force stays).
    void rest(const std::string& queue, Clock::duration for_how_long);
    // Whether some queue may rest now: one atomic load and, only after a rest was ever set, a
    // clock read. Cheap enough for every fetch.
    bool any() const;
    bool resting(const std::string& queue) const;

  private:
    mutable std::mutex mutex_;
    std::unordered_map<std::string, Clock::time_point> until_;
    std::atomic<int64_t> latest_{0};  // the latest rest's end, Clock ticks; 0: none ever set
};

QueueRests& queue_rests();

}  // namespace kiqd
