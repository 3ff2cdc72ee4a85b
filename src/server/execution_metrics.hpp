#pragma once
// ExecutionMetrics: Sidekiq's per-class execution metrics (the Web UI's Metrics page), counted in
// process memory by the processor threads and written by the heartbeat (io thread) with each
// beat, in the beat's first round trip (docs/data-model.md#execution-metrics). Per class
// (`wrapped`, else `class`) since the last beat: runs (failures included), failures, the total
// milliseconds of the runs that did not fail, and a histogram of those run times over Sidekiq's
// 26 buckets. Nothing here touches Redis: flush_commands() builds the commands, in the layout of
// Sidekiq 7 (lib/sidekiq/metrics/tracking.rb and shared.rb, v7.3) and/or Sidekiq 8 (v8.0):
//   7: HINCRBY j|<%Y%m%d>|<%-H>:<%-M> <Class>|p|f|ms            (8 h)
//      BITFIELD <Class>-<%d>-<%H>:<%-M> OVERFLOW SAT INCRBY u16 #i n   (8 h)
//   8: HINCRBY j|<%y%m%d>|<%-H>:<%M> ...                         (8 h)
//      HINCRBY j|<%y%m%d>|<%-H>:<tens digit of the minute> ...   (3 days)
//      BITFIELD h|<Class>-<%-d>-<%-H>:<%-M> ...                  (8 h)
// The minute is that of the flush (UTC), as in Sidekiq. A batch whose write fails is dropped, as
// Sidekiq drops it: the counts are not idempotent, and a retry after a lost reply would count
// twice. record() is called by any processor thread; enable()/take() by the heartbeat.
#include <array>
#include <atomic>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

class ExecutionMetrics {
  public:
    static constexpr size_t kBuckets = 26;
    // Upper bounds (exclusive) of Sidekiq's histogram buckets in ms; the last is "Slow".
    static const std::array<double, kBuckets>& bucket_bounds();
    // The bucket of a run of `ms` milliseconds: the first whose bound is above it.
    static size_t bucket_of(long long ms);

    struct ClassCounts {
        long long processed = 0, failed = 0, ms = 0;
        std::array<long long, kBuckets> histogram{};
    };
    using Batch = std::map<std::string, ClassCounts, std::less<>>;  // class → counts

    // Which Sidekiq layouts to write; none: record() counts nothing.
    struct Layouts {
        bool v7 = false, v8 = false;
        bool any() const { return v7 || v8; }
        bool operator==(const Layouts& o) const { return v7 == o.v7 && v8 == o.v8; }
    };

    void enable(Layouts layouts);
    Layouts layouts() const;
    // One finished run: `failed` runs count in p and f only, others in p, ms and the histogram
    // (Sidekiq times only the runs that did not raise).
    void record(std::string_view job_class, bool failed, long long ms);
    // The counts since the previous take(), and an empty start.
    Batch take();

    // The commands writing `batch` at `now` (epoch seconds, UTC) in the given layouts: HINCRBY
    // and BITFIELD per class and an EXPIRE per key. Empty for an empty batch.
    static std::vector<redis::Command> flush_commands(const Batch& batch, const Keys& keys,
                                                      std::time_t now, Layouts layouts);

  private:
    std::atomic<bool> v7_{false}, v8_{false};
    mutable std::mutex mutex_;
    Batch counts_;
};

}  // namespace kiqd
