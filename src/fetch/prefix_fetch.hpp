#pragma once
// PrefixFetch: the fetch of basic and batched reliable fetch, at a cost that does not grow with
// the number of configured queues. It remembers, per process, which queues were empty at the
// last look, draws each job's weighted (or strict) order over the others only, and asks Redis
// for a short prefix of that order (kWidth queues; one among many) instead of every queue:
//
// * The first queue of a Sidekiq order that has a job is what a fetch takes. Drawing the order
//   over the non-empty queues only gives that queue the same distribution (the order of a
//   subset's first occurrences in a uniform shuffle is a uniform shuffle of the subset), so
//   each non-empty queue keeps its share by weight, and strict order stays strict.
// * A queue found empty (by a pop that got nothing) is left out of later draws until a sweep
//   sees a job in it again, or a blocking wait takes a job from it. A sweep is one script call
//   (an LLEN of every queue that is not paused), at most every kSweepPeriod; and, for reliable
//   fetch, whose idle threads each wait on one queue, when every queue looks empty (before a
//   fetch would block). Basic fetch then blocks on every queue (BRPOP), which returns at once
//   when any has a job, so a trickle of jobs costs no sweep per job. So no fetch blocks while a
//   queue has jobs, and a queue that gets jobs while others keep the threads busy waits at most
//   a sweep period to be drawn again.
// * With more than kFewQueues queues to draw from, a weighted order is one queue, and serves a
//   run of kRun consecutive jobs of a refill (fewer keys, fewer working lists created and
//   deleted); shares by weight hold, as each run's queue is drawn by weight. Among fewer
//   queues every job of a refill has its own order, of kWidth queues.
// * A job whose prefix turns out empty is skipped in that script call; a call that takes nothing
//   makes the caller draw again over what is left, so the fallback always reaches every queue
//   believed non-empty.
//
// Shared by all processor threads of one fetcher: the empty flags are atomics, one thread at a
// time sweeps (the others go on with the flags as they are). Paused queues (QueueOrder) are
// never drawn nor swept. Not used with fair queues (fair_fetch.hpp keeps its own script).
#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fetch/fetcher.hpp"
#include "kiqd/redis/script.hpp"

namespace kiqd {

class PrefixFetch {
  public:
    static constexpr size_t kWidth = 3;  // queues of each job's order sent to Redis
    // Above this many candidate queues, a weighted order is sent as its first queue only (every
    // key sent costs Redis more than a job; see prepare()).
    static constexpr size_t kFewQueues = 16;
    // ... and each such order serves this many consecutive jobs of a refill (see prepare()).
    static constexpr size_t kRun = 5;
    static constexpr std::chrono::milliseconds kSweepPeriod{100};

    // `queue_keys`: by index in order.names(). `working_keys` (same indexes) and `suspects`:
    // reliable fetch (jobs are moved, suspects flagged); empty for basic fetch (jobs popped).
    PrefixFetch(const QueueOrder& order, std::vector<std::string> queue_keys,
                std::vector<std::string> working_keys = {}, std::string suspects = {});

    // Up to `count` jobs, each from the first non-empty queue of its own draw, in one script
    // call per round (more rounds only when a whole prefix was empty). `before`: commands sent
    // in the same write as the first call (their replies unchecked, NOSCRIPT resent), cleared
    // once sent. Empty when every queue not paused looks empty (reliable fetch: checked by a
    // sweep). Throws
    // redis::ReplyError (WRONGTYPE, nothing taken) when a queue holds something other than a list.
    std::vector<UnitOfWork> take(redis::Connection& conn, std::mt19937_64& rng, size_t count,
                                 std::vector<redis::Command>& before) const;
    // One job for basic fetch without prefetch: a plain RPOP of the first queue of the draw
    // (cheaper for Redis than a script), the next draw when it was empty. nullopt when every
    // queue not paused looks empty (the caller then BRPOPs them all). `before` as for take().
    std::optional<UnitOfWork> pop_one(redis::Connection& conn, std::mt19937_64& rng,
                                      std::vector<redis::Command>& before) const;

    // A blocking wait took a job from queue `index`: it is drawn again.
    void woke_with_job(size_t index) const;
    bool known_empty(size_t index) const { return empty_[index].load(std::memory_order_relaxed); }
    // One script call that asks every queue not paused whether it has a job (LLEN); updates
    // the flags. Public for tests.
    void sweep(redis::Connection& conn) const;

    // The order's queues that are neither paused nor known empty, by index in order.names().
    void candidates(std::vector<size_t>& out) const;
    // `width` entries of one job's order over `candidates` (weighted: drawn one by one with
    // probability proportional to weight among those not drawn yet, which is Sidekiq's
    // shuffle-then-uniq order; strict: the first ones). `sums` from candidate_sums().
    void draw(std::mt19937_64& rng, const std::vector<size_t>& candidates,
              const std::vector<long long>& sums, size_t width, std::vector<size_t>& out) const;
    // Running sums of the candidates' weights, for draw().
    void candidate_sums(const std::vector<size_t>& candidates, std::vector<long long>& sums) const;

  private:
    // Sweeps when kSweepPeriod has passed since the last sweep, unless another thread is.
    bool maybe_sweep(redis::Connection& conn) const;  // true when it swept
    // Reliable fetch (jobs moved): its idle threads wait on one queue each, so it looks at
    // every queue before it reports them all empty; basic fetch's BRPOP over all of them does.
    bool sweep_before_block() const { return !working_keys_.empty(); }
    void mark_empty(size_t index) const { empty_[index].store(true, std::memory_order_relaxed); }
    // Builds one script call's KEYS and ARGV for `count` jobs; false when no queue is a
    // candidate. `sent`: the order.names() index of each queue key sent.
    bool prepare(std::mt19937_64& rng, size_t count, std::vector<std::string>& keys,
                 std::vector<std::string>& args, std::vector<size_t>& sent) const;
    std::vector<UnitOfWork> units(const redis::Reply& reply, const std::vector<size_t>& sent) const;

    const QueueOrder& order_;
    std::vector<std::string> queue_keys_;
    std::vector<std::string> working_keys_;
    std::string suspects_;
    redis::Script script_;
    redis::Script sweep_script_;
    std::unique_ptr<std::atomic<bool>[]> empty_;    // by index in order.names()
    mutable std::atomic<long long> last_sweep_{0};  // steady clock, ns; 0 = sweep at once
    mutable std::atomic<bool> sweeping_{false};
};

}  // namespace kiqd
