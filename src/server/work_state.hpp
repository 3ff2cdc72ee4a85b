#pragma once
// WorkState: which job each processor thread is running right now, plus the processed/failed
// counters. Processor threads write their own slot; the heartbeat reads a snapshot (for the
// busy-jobs hash and the counters it flushes); the manager, when threads are still stuck in
// handler code after the hard-shutdown grace, takes their jobs and marks the slots abandoned, so
// that such a thread, should it return after all, records no outcome for a job the manager now
// owns. Each slot has its own mutex;
// counters are atomics — nothing here costs a Redis round trip.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kiqd {

struct RunningJob {
    std::string queue;
    std::string payload;  // the original JSON, byte for byte
    std::string display_class;
    std::string jid;
    long long run_at = 0;  // epoch seconds, for the busy hash
    std::chrono::steady_clock::time_point started;
};

class WorkState {
  public:
    explicit WorkState(size_t slots);

    void begin(size_t slot, RunningJob job);
    // Ends the slot's job. False when the manager has already taken it (abandon_all): the
    // caller must then record no outcome.
    bool finish(size_t slot);
    // Takes every running job and marks its slot abandoned (threads stuck past the hard-shutdown
    // grace).
    std::vector<RunningJob> abandon_all();

    struct Entry {
        const std::string* tid;
        RunningJob job;
    };
    std::vector<Entry> snapshot() const;
    size_t busy() const { return busy_.load(std::memory_order_relaxed); }
    size_t slots() const { return slots_.size(); }
    // Jobs running in slots first..first+count-1 (one capsule's threads).
    size_t busy_in(size_t first, size_t count) const;
    // A short id per slot, unique in the process, used as the busy-hash field (Sidekiq's "tid").
    const std::string& tid(size_t slot) const { return slots_[slot]->tid; }

    std::atomic<long long> processed{0};  // every job that ran, failed ones included
    std::atomic<long long> failed{0};
    std::atomic<long long> requeued{0};  // interrupted by a hard shutdown and pushed back

  private:
    struct Slot {
        mutable std::mutex mutex;
        std::optional<RunningJob> job;
        bool abandoned = false;
        std::string tid;
    };
    std::vector<std::unique_ptr<Slot>> slots_;
    std::atomic<size_t> busy_{0};
};

}  // namespace kiqd
