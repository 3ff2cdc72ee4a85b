#pragma once
// ReliableFetcher (`fetch: reliable`): no job is lost when a process dies. A fetch moves a job
// atomically from its queue into this process's working list for that queue (RPOPLPUSH, the
// same move as LMOVE RIGHT LEFT: first on the first queue of this fetch's weighted or strict
// order, then by one Lua script over the rest), and the job leaves the working list only in the
// same MULTI that
// records its outcome (acknowledge, retry, dead) or puts it back (requeue). If the process
// dies, its working lists stay in Redis and OrphanRecovery (orphan_recovery.hpp) returns them.
//
// Batched (reliable_fetch.batch_size N > 1, the default): one Lua script moves up to N jobs, each
// from the first non-empty queue of its own weighted draw, into the working lists, and the
// processors take them from a process-wide FetchBuffer (fetch_buffer.hpp). A success's LREM is
// deferred and rides along with the next refill: a job leaves the working list only after its
// outcome, so a kill -9 can run a finished job again (at most max_refills × batch_size +
// concurrency of them: what the buffer can hold plus the running jobs) but never loses one;
// buffered jobs are in the working list, so orphan recovery returns them.
//
// The poison-pill guard (orphan_recovery.hpp) counts only interruptions known to have hit a
// started job. A job fetched one at a time starts at once, so its place in the working list
// says so. A batched fetch cannot say which of its jobs started without a write per job, which
// is what batching saves; so a job recovered from a dead process becomes a *suspect*: the batch
// script (or, after a blocking fetch, one SREM) flags it when it is fetched again, the processor
// records its start in this process's started set before running it (one round trip, for
// suspects only), and its acknowledgement or requeue removes that mark. Unflagged jobs cost
// nothing more than one EXISTS per refill while the suspects set is empty.
//
// When every queue is empty the thread blocks (BRPOPLPUSH, 2 s) on one queue; idle threads
// spread over the queues (thread i waits on queue (i + round) mod n), so with concurrency >=
// the number of queues a new job in any queue is taken at once.
//
// Ownership fence (ownership_fence.hpp): a process that was away longer than liveness_ttl (a
// stall, a VM pause, Redis out of reach) may have had its working lists recovered by another
// process. Before a job fetched before that starts, retrieve_work proves that it is still in
// this process's working list, or drops it without running it (the recovering process's copy
// owns it). Jobs fetched while the liveness key is known to have lived cost nothing more.
//
// Shared by all processor threads (immutable except the ready latch and the fence). Processors do
// not fetch until the process has registered its working lists and liveness key (set_ready), so
// that no other process's recovery can take a freshly fetched job for an orphan.
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fetch/fetcher.hpp"
#include "fetch/ownership_fence.hpp"
#include "kiqd/job_context.hpp"
#include "kiqd/redis/script.hpp"

namespace kiqd {

class PrefixFetch;

class ReliableFetcher final : public Fetcher {
  public:
    static constexpr int kBlockSeconds = 2;
    // The suspects set expires a week after its last addition (as the interruption counts).
    static constexpr long long kSuspectsTtlSeconds = 7 * 24 * 3600;

    ReliableFetcher(const Keys& keys, const QueueOrder& order, std::string identity,
                    size_t batch_size = 1, size_t max_refills = 1, size_t threads = 0);
    // `fair`: the fair queues' fetch (fair_fetch.hpp), or null.
    ReliableFetcher(const Keys& keys, const QueueOrder& order, std::string identity,
                    size_t batch_size, size_t max_refills, std::unique_ptr<FairFetch> fair,
                    size_t threads = 0);
    ~ReliableFetcher() override;

    using Fetcher::retrieve_work;
    std::optional<UnitOfWork> retrieve_work(redis::Connection& conn, std::mt19937_64& rng,
                                            size_t slot,
                                            std::vector<redis::Command>& pending) const override;
    std::vector<redis::Command> with_acknowledgement(
        const UnitOfWork& unit, std::vector<redis::Command> outcome) const override;
    std::vector<redis::Command> mark_started_commands(const UnitOfWork& unit) const override;
    std::vector<redis::Command> unmark_started_commands(const UnitOfWork& unit) const override;
    std::vector<redis::Command> requeue_commands(
        const std::vector<UnitOfWork>& units) const override;
    bool defer_acknowledgement(const UnitOfWork& unit, size_t slot) const override;
    std::vector<redis::Command> release_commands() const override;
    std::vector<UnitOfWork> take_buffered() const override;
    std::vector<std::string> held_payloads() const override;
    size_t batch_size() const { return batch_; }
    // Batched fetch only: what each refill acquires for its jobs ahead of their middlewares
    // (refill_acquirer.hpp). Set before any processor starts; `acquirer` outlives this.
    // `always`: acquire with every refill, whatever the jobs' pace (in-process tests, whose
    // takes are not a thread's measured pace); otherwise only while the refilling thread's jobs
    // are short (retrieve_work).
    void set_acquirer(const RefillAcquirer* acquirer, bool always = false);
    void release_acquired(const UnitOfWork& unit, std::vector<redis::Command>& out) const override;
    bool defer_commands(std::vector<redis::Command>& commands, size_t slot) const override;
    const std::string* working_list(const std::string& queue) const override;

    // This process's working lists, one per configured queue (queue name, list key).
    const std::vector<std::pair<std::string, std::string>>& working_lists() const {
        return working_;
    }
    const std::string& identity() const { return identity_; }
    // The poison-pill guard's keys (orphan_recovery.hpp): the SET of suspects' payloads, and a
    // batching process's SET of the suspects it has started.
    std::string suspects_key() const { return keys_.prefix() + "kiqd:reliable:suspects"; }
    std::string started_key(const std::string& identity) const {
        return keys_.prefix() + "kiqd:reliable:started:" + identity;
    }
    // How many of a process's jobs other processes' recoveries have moved (ownership_fence.hpp).
    std::string recoveries_key(const std::string& identity) const {
        return keys_.prefix() + "kiqd:reliable:recoveries:" + identity;
    }
    // Batched fetch's deferred acknowledgements, for the ack flusher (server/ack_flusher.hpp):
    // when the oldest was deferred (nullopt: none, or not batched); whether the flusher may
    // sleep until `wake` (called by a processor) says one was deferred; and a flush of every
    // one now, which keeps them for the next write when it fails (returns how many went).
    std::optional<std::chrono::steady_clock::time_point> oldest_deferred_ack() const;
    bool ack_watcher_idle() const;
    void set_ack_watcher(std::function<void()> wake) const;
    size_t flush_acknowledgements(redis::Connection& conn) const;
    // Called once the working lists and the liveness key are in Redis.
    void set_ready() const { ready_.request_stop(); }
    // What this process knows of its own liveness key; the liveness thread reports each refresh.
    OwnershipFence& fence() const { return fence_; }

  private:
    // retrieve_work without the ownership fence.
    std::optional<UnitOfWork> take(redis::Connection& conn, std::mt19937_64& rng, size_t slot,
                                   std::vector<redis::Command>& pending) const;
    // Whether `unit` may start here (ownership_fence.hpp); a job it does not own any more is
    // dropped: what it acquired ahead is released (with `pending`), nothing is acknowledged.
    bool still_owned(redis::Connection& conn, UnitOfWork& unit,
                     std::vector<redis::Command>& pending) const;
    // The queue an idle thread blocks on: a different one per slot and round, not paused.
    size_t idle_queue(size_t slot, unsigned round) const;
    std::vector<UnitOfWork> move_batch(redis::Connection& conn, std::mt19937_64& rng,
                                       std::vector<redis::Command>& pending,
                                       const std::vector<UnitOfWork>& acks,
                                       bool acquire_ahead) const;  // with the acquirer_
    // The fair queues' refill: one script call over every queue (fair_fetch.hpp). `cmds`: the
    // commands to send first; `deferred`: those of them to restore when the write fails.
    std::vector<UnitOfWork> move_batch_all_queues(redis::Connection& conn, std::mt19937_64& rng,
                                                  std::vector<redis::Command>& pending,
                                                  std::vector<redis::Command>& cmds,
                                                  std::vector<redis::Command> deferred) const;
    redis::Command ack_command(const UnitOfWork& unit) const;

    const Keys& keys_;
    const QueueOrder& order_;
    std::string identity_;
    std::vector<std::string> queue_keys_;                       // by index in order_.names()
    std::vector<std::pair<std::string, std::string>> working_;  // by index in order_.names()
    // working_'s indexes by queue name, with many queues (working_list runs twice a job: a
    // scan of 500 names was a fifth of a no-op job's CPU).
    std::unordered_map<std::string_view, size_t> working_index_;
    redis::Script fetch_script_;
    size_t batch_;
    std::vector<std::string> batch_keys_;  // queue keys, then working list keys
    redis::Script batch_script_;
    std::unique_ptr<FetchBuffer> buffer_;  // only when batch_ > 1
    std::unique_ptr<FairFetch> fair_;      // only with fair queues
    std::unique_ptr<PrefixFetch> prefix_;  // batched, without fair queues (prefix_fetch.hpp)
    std::vector<std::string> fair_keys_;   // queue keys, then working list keys
    const RefillAcquirer* acquirer_ = nullptr;
    bool acquire_always_ = false;
    // Releases deferred to the next refill (defer_commands), one list per processor slot, so a
    // job costs no shared lock; a refill takes every list.
    struct Deferred {
        std::mutex mutex;
        std::vector<redis::Command> commands;
    };
    std::vector<std::unique_ptr<Deferred>> deferred_;  // by slot; the vector itself is immutable
    std::vector<redis::Command> take_deferred() const;
    void restore_deferred(std::vector<redis::Command> commands) const;
    // Fair queues with batch_size 1: one script call for every waiting thread.
    std::unique_ptr<FetchCombiner> combiner_;
    // A one-shot latch (StopSignal's shape: set once, awaitable), not a stop request.
    mutable StopSignal ready_;
    mutable OwnershipFence fence_;
};

}  // namespace kiqd
