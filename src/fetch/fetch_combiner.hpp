#pragma once
// FetchCombiner: one fetch script call for every processor thread that is waiting for a job at
// that moment (basic fetch of fair queues without `prefetch`, docs/fair-fetch.md). A fair queue's
// script costs Redis a fixed ~10 µs a call on top of its per-job work, ten times a BRPOP's, so
// one call per job made basic fetch 2.4–2.6× a plain queue's cost per job. Here the first thread
// to arrive leads a round: it waits until the previous round is back, then takes one job for
// itself and one for each thread that joined the round meanwhile, in one call, and hands each
// its own. A job is only ever taken for a thread already waiting for it inside retrieve_work,
// never ahead of demand: nothing is buffered, so what a kill -9 can lose is what basic fetch
// already risks (each thread's job between its pop and its end), and a clean stop has nothing
// to put back. Only a lost connection can lose more: the leader's reply carries every job of the
// round (as with `prefetch`).
// Shared by all processor threads; every member is guarded by one mutex.
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "fetch/fetcher.hpp"

namespace kiqd {

class FetchCombiner {
  public:
    // Takes up to `count` jobs in one call (never more: each belongs to a waiting thread), in
    // the order they should be handed out.
    using Fetch = std::function<std::vector<UnitOfWork>(size_t count)>;

    // Calls in flight at once by default. With one, a leader that the OS puts aside between its
    // reply and handing the jobs out stalls every thread; with two, Redis works on one round
    // while the other's jobs are handed out, and a round still gathers the threads that asked
    // meanwhile. A/B on the shared VM (fair_fetch_cost.sh, basic fetch): two gave 17–20 µs/job
    // against 23 for one (Redis CPU 9.3–10.4 against 9.2 µs/job); noisy, see docs.
    static constexpr size_t kMaxInFlight = 2;

    // The most jobs one call takes when the number of processor threads is not given.
    static constexpr size_t kMaxRound = 64;

    // `max_round`: the most jobs one call takes (more waiting threads wait for the next round),
    // normally the processor threads (0: kMaxRound); `max_in_flight`: calls at once (a round's
    // leader waits while that many are).
    explicit FetchCombiner(size_t max_round, size_t max_in_flight = kMaxInFlight)
        : max_round_(max_round ? max_round : kMaxRound),
          max_in_flight_(max_in_flight ? max_in_flight : 1) {}

    // The caller's job, fetched by this thread (the round's leader: `fetch` runs here, without
    // the lock) or by another thread's call; nullopt when the round found none left for it.
    // Rethrows what the leader's `fetch` throws; the other threads of a failed round get nullopt.
    std::optional<UnitOfWork> take(const Fetch& fetch);

    // Rounds led so far, jobs handed out, and threads in the round not started yet (tests).
    size_t rounds() const;
    size_t handed() const;
    size_t joined() const;

  private:
    struct Round {
        size_t joined = 0;  // threads in it, the leader first
        size_t wanted = 0;  // jobs asked for, once the leader has started it
        std::vector<UnitOfWork> got;
        bool done = false;
        std::condition_variable cv;  // this round's threads wait on it
    };
    // Marks `round` done (lock held on entry, released on return) and wakes its threads.
    void finish(Round& round, std::unique_lock<std::mutex>& lock);

    mutable std::mutex mutex_;
    std::condition_variable cv_;   // leaders wait on it for a free call slot
    std::shared_ptr<Round> open_;  // the round new threads join; not started yet
    size_t in_flight_ = 0;         // leaders calling Redis
    const size_t max_round_;
    const size_t max_in_flight_;
    size_t rounds_ = 0;
    size_t handed_ = 0;
};

}  // namespace kiqd
