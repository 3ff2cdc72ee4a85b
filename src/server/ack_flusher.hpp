#pragma once
// AckFlusher: bounds how long a finished job's acknowledgement waits under batched reliable
// fetch. A success's LREM rides with the next refill (reliable_fetcher.hpp), which comes within a
// few short jobs; but a refill comes only when the buffer runs low, so behind a batch of long
// jobs (or a long job after short ones, or an idle spell) it could wait seconds, and a process
// killed or stalled past liveness_ttl meanwhile had its finished jobs run again. This thread
// sends every deferred acknowledgement once the oldest has waited FetchBuffer::kAckDelay (5 ms),
// on its own connection; jobs that ran that long are not deferred at all (fetch_buffer.hpp).
// It sleeps until the oldest is due, and without any until a processor defers one (the fetch
// buffer wakes it), so an idle process makes no wake-ups. A failed write keeps the
// acknowledgements for the next refill or flush (LREM is idempotent) and backs off.
// Threads: its own (PeriodicWorker); start() and stop() from the owner (OrphanRecovery).
#include <chrono>
#include <optional>

#include "common/periodic_worker.hpp"
#include "fetch/reliable_fetcher.hpp"
#include "server/runtime.hpp"

namespace kiqd {

class AckFlusher {
  public:
    AckFlusher(Runtime& rt, const ReliableFetcher& fetcher);
    ~AckFlusher();
    // Nothing to do without batching (every acknowledgement is written at once).
    void start();
    // Ends the thread, then sends what is still deferred (a few tries): the owner returns this
    // process's working lists to their queues next, and a finished job must not be among them.
    void stop() noexcept;

  private:
    void round();
    PeriodicWorker::Duration next_wait();

    Runtime& rt_;
    const ReliableFetcher& fetcher_;
    std::optional<redis::Connection> conn_;  // its thread's, start() to stop()
    std::chrono::milliseconds backoff_{0};   // its thread's: after a failed write
    PeriodicWorker worker_;                  // last: its thread ends before the rest goes
};

}  // namespace kiqd
