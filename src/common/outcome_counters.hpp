#pragma once
// OutcomeCounters: the process-wide counts of what happened to jobs besides running (retried,
// sent to the dead set, requeued, recovered, throttled, parked, rerouted, …) and of Redis
// reconnects, exported by /metrics as kiqd_*_total counters (server/metrics_server.cpp). One
// instance per process, like a Prometheus client's default registry: the component where the
// event happens adds to it, whatever thread it runs on (relaxed atomics; a scrape reads them).
#include <atomic>
#include <cstdint>

namespace kiqd {

struct OutcomeCounters {
    using Counter = std::atomic<std::uint64_t>;
    Counter retried{0};              // failures with a retry scheduled
    Counter dead{0};                 // jobs sent to the dead set (failures, bad payloads, poison)
    Counter discarded{0};            // failures of `retry: false` jobs, dropped as Sidekiq does
    Counter unrunnable{0};           // payloads that could not be run (bad JSON, too large, …)
    Counter orphans_recovered{0};    // jobs of dead processes put back in their queues
    Counter poison_pills{0};         // jobs whose process died under them too often: dead set
    Counter throttled{0};            // jobs put back in the schedule by a throttle
    Counter parked{0};               // jobs parked because their class or queue is paused
    Counter rerouted{0};             // jobs moved to a fair-tenant queue by the server side
    Counter unique_conflicts{0};     // duplicates refused by a unique lock (any on_conflict)
    Counter unique_locks_reaped{0};  // unique locks whose holder was gone, freed by the reaper
    Counter exec_timeouts{0};        // exec commands stopped at their timeout
    Counter runner_timeouts{0};      // runner jobs stopped at their timeout
    Counter redis_reconnects{0};     // Redis connections opened again after one was lost
};

OutcomeCounters& outcome_counters() noexcept;

inline void increment(OutcomeCounters::Counter& counter) noexcept {
    counter.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace kiqd
