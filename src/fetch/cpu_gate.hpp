#pragma once
// CpuGate: per process, at most `cpu_bound_concurrency` jobs of `resource_boundary: cpu`
// classes run at once, however large `concurrency` is, while other jobs keep running.
//
// Design. A processor thread that fetched a cpu-bound job asks admit():
//   * a cpu slot is free → it takes the slot and runs the job;
//   * no slot is free → the job goes into a small in-process hold-back buffer (FIFO) and the
//     thread goes straight back to fetching, so the other queues and classes are not held up;
//   * when a thread finishes a cpu-bound job, release() hands it the oldest held job and it
//     keeps the slot (so held jobs never wait for a fetch, and the slot count never exceeds
//     the limit).
// The buffer is bounded (held_limit = concurrency): a thread that meets a full buffer waits for
// room. That only happens when more than concurrency + limit cpu-bound jobs are fetched, i.e.
// when a queue is mostly cpu-bound work — route such classes to their own queue
// (routing_rules) to keep other jobs from queueing behind them.
//
// Safety of held jobs. They are fetched but not started:
//   * quiet/stop: the first processor thread that leaves its loop calls close(), which returns
//     every held job, and pushes them back to the front of their queues (Manager does the same
//     at the hard-shutdown deadline); admit() after close() says `closed` and the caller pushes
//     its job back itself;
//   * reliable fetch: a held job stays in this process's working list until it has run, so a
//     crash loses nothing (orphan recovery returns it); held payloads count as claimed for the
//     stranded-job check (held_payloads());
//   * basic fetch: like any job BRPOPed by Sidekiq's BasicFetch, a crash (SIGKILL, OOM) loses
//     the jobs held at that moment — at most `concurrency` of them, in addition to the running
//     ones. Use `fetch: reliable` when that matters.
// Thread-safe (one mutex; every call is O(1) apart from close() and held_payloads()).
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "config/worker_catalog.hpp"
#include "fetch/fetcher.hpp"

namespace kiqd {

class CpuGate {
  public:
    CpuGate(const WorkerCatalog& catalog, size_t limit, size_t held_limit);

    bool cpu_bound(const std::string& job_class) const;

    enum class Admit { run, held, closed };
    // run: the caller holds a cpu slot and must call release() after the job; held: `unit` was
    // moved into the buffer; closed: the process is stopping, the caller pushes `unit` back.
    Admit admit(UnitOfWork& unit);
    // Ends a cpu-bound job: returns the next held job (the caller keeps the slot and runs it),
    // or frees the slot and returns nullopt.
    std::optional<UnitOfWork> release();
    // Closes the gate (quiet/stop) and returns every held job, to be pushed back.
    std::vector<UnitOfWork> close();

    std::pair<size_t, size_t> counts() const;  // (running, held)
    std::vector<std::string> held_payloads() const;
    size_t limit() const { return limit_; }

  private:
    const WorkerCatalog& catalog_;
    const size_t limit_;
    const size_t held_limit_;
    mutable std::mutex mutex_;
    std::condition_variable room_;  // the buffer lost an entry, or the gate closed
    size_t running_ = 0;
    std::deque<UnitOfWork> held_;
    bool closed_ = false;
};

}  // namespace kiqd
