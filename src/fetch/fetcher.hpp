#pragma once
// Fetchers take jobs off the queues. BasicFetcher is Sidekiq's BasicFetch: BRPOP over the
// queue order of this fetch with a 2 s timeout (so threads notice quiet/stop), acknowledge does
// nothing, requeue is RPUSH of the original string to the front of the line. ReliableFetcher
// (reliable_fetcher.hpp) keeps every fetched job in a working list until its outcome is written.
// A fetcher is shared by all processor threads; each thread passes its own connection, RNG and
// slot number. With `prefetch: N` (N > 1) BasicFetcher pops up to N jobs per round trip into a
// process-wide FetchBuffer (fetch_buffer.hpp): buffered jobs exist only in this process, so a
// kill -9 loses them (a clean stop pushes them back); hence opt-in.
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fetch/queue_order.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"
#include "kiqd/redis/script.hpp"
#include "redis/transaction.hpp"

namespace kiqd {

class FetchBuffer;
class FairFetch;
struct AcquiredSet;
class RefillAcquirer;
class FetchCombiner;
class PrefixFetch;

struct UnitOfWork {
    std::string queue;    // without the "queue:" prefix
    std::string payload;  // as popped, byte for byte
    // Reliable fetch: returned by orphan recovery and taken by a batched fetch, so its start is
    // recorded in Redis (mark_started_commands) for the poison-pill guard (orphan_recovery.hpp).
    bool suspect = false;
    // What a batched refill acquired for this job ahead of its middlewares (refill_acquirer.hpp),
    // or null. Shared by copies of the unit; one thread at a time uses it.
    std::shared_ptr<AcquiredSet> acquired{};
    // Reliable fetch: when the fetch that moved it into the working list was sent (the
    // ownership fence, ownership_fence.hpp, checks that this process has owned it since).
    std::chrono::steady_clock::time_point fetched_at{};
};

class Fetcher {
  public:
    virtual ~Fetcher() = default;
    // Blocks for at most ~2 s; nullopt when every queue stayed empty. Throws redis::Error.
    // `slot` is the calling processor's number (0..concurrency-1). `pending` are commands left
    // over from the previous job (lock releases): they go out in the same write as the fetch
    // and are cleared once sent (kept for the next try when the write fails); their replies are
    // not checked (they must be idempotent). A job taken from a batched fetch's buffer costs no
    // write: `pending` is left for the job's first round trip (the processor sends what is left
    // before the handler runs).
    virtual std::optional<UnitOfWork> retrieve_work(redis::Connection& conn, std::mt19937_64& rng,
                                                    size_t slot,
                                                    std::vector<redis::Command>& pending) const = 0;
    std::optional<UnitOfWork> retrieve_work(redis::Connection& conn, std::mt19937_64& rng,
                                            size_t slot) const {
        std::vector<redis::Command> none;
        return retrieve_work(conn, rng, slot, none);
    }
    // The commands that record a job's outcome (`outcome`: bare retry/dead entries, or nothing
    // for a success) together with its acknowledgement, as one transaction. Basic fetch has
    // nothing to acknowledge.
    virtual std::vector<redis::Command> with_acknowledgement(
        const UnitOfWork&, std::vector<redis::Command> outcome) const {
        return redis::in_transaction(std::move(outcome));
    }
    // The list that holds a fetched job of `queue` until it is acknowledged (reliable fetch),
    // or null. A middleware that parks a job elsewhere removes it from there in the same atomic
    // step, so a crash in between cannot leave it in both places (and run it twice).
    virtual const std::string* working_list(const std::string& /*queue*/) const { return nullptr; }
    // Puts jobs back at the front (the popping end) of their queues, RPUSHed in the given order
    // as Sidekiq's bulk_requeue does, and acknowledges them.
    virtual std::vector<redis::Command> requeue_commands(
        const std::vector<UnitOfWork>& units) const = 0;
    // What must reach Redis before `unit` starts (reliable fetch: a suspect's start mark), and
    // what forgets that mark when the job leaves the working list some other way (a park).
    virtual std::vector<redis::Command> mark_started_commands(const UnitOfWork&) const {
        return {};
    }
    virtual std::vector<redis::Command> unmark_started_commands(const UnitOfWork&) const {
        return {};
    }
    // Batched fetchers: takes a successful job's acknowledgement to send with a later write
    // (the next refill, or release_commands). False: the caller writes with_acknowledgement.
    // `slot`: the calling processor's (its own list, no shared lock per job).
    virtual bool defer_acknowledgement(const UnitOfWork&, size_t /*slot*/) const { return false; }
    // Everything a stopping processor must still write: deferred acknowledgements, and every
    // buffered job put back at the front of its queue. Empties the buffer.
    virtual std::vector<redis::Command> release_commands() const { return {}; }
    // Jobs fetched but not handed to a processor yet, removed from the buffer (hard shutdown).
    virtual std::vector<UnitOfWork> take_buffered() const { return {}; }
    // Payloads this process holds without running them (buffered, or done with a deferred
    // acknowledgement): not stranded, whatever orphan recovery sees in the working list.
    virtual std::vector<std::string> held_payloads() const { return {}; }
    // Releases what `unit` acquired ahead of its middlewares and none claimed (a job that never
    // reached them): appends the commands to `out` (refill_acquirer.hpp).
    virtual void release_acquired(const UnitOfWork&, std::vector<redis::Command>& /*out*/) const {}
    // Takes lock and slot releases (idempotent commands) to send with the next refill, by any
    // thread, instead of a round trip of their own; false (nothing taken) unless the fetch is
    // batched and `slot`'s jobs are short (so that a refill comes soon: fetch_buffer.hpp).
    virtual bool defer_commands(std::vector<redis::Command>& /*commands*/, size_t /*slot*/) const {
        return false;
    }
};

class BasicFetcher final : public Fetcher {
  public:
    static constexpr int kTimeoutSeconds = 2;  // Sidekiq's BasicFetch::TIMEOUT

    // `max_refills`: prefetch round trips that may be in flight at once; `threads`: processor
    // slots, each with a pile (see FetchBuffer).
    BasicFetcher(const Keys& keys, const QueueOrder& order, size_t prefetch = 1,
                 size_t max_refills = 1, size_t threads = 0);
    // `fair`: the fair queues' fetch (fair_fetch.hpp), or null.
    BasicFetcher(const Keys& keys, const QueueOrder& order, size_t prefetch, size_t max_refills,
                 std::unique_ptr<FairFetch> fair, size_t threads = 0);
    ~BasicFetcher() override;
    using Fetcher::retrieve_work;
    std::optional<UnitOfWork> retrieve_work(redis::Connection& conn, std::mt19937_64& rng,
                                            size_t slot,
                                            std::vector<redis::Command>& pending) const override;
    std::vector<redis::Command> requeue_commands(
        const std::vector<UnitOfWork>& units) const override;
    std::vector<redis::Command> release_commands() const override;
    std::vector<UnitOfWork> take_buffered() const override;
    size_t prefetch() const { return prefetch_; }

  private:
    std::vector<UnitOfWork> pop_batch(redis::Connection& conn, std::mt19937_64& rng,
                                      std::vector<redis::Command>& pending) const;

    const Keys& keys_;
    const QueueOrder& order_;
    size_t prefetch_;
    std::vector<std::string> queue_keys_;        // by index in order_.names()
    std::unique_ptr<redis::Script> pop_script_;  // fair queues with prefetch
    std::unique_ptr<FetchBuffer> buffer_;        // only when prefetch_ > 1
    std::unique_ptr<FairFetch> fair_;            // only with fair queues
    std::unique_ptr<FetchCombiner> combiner_;    // fair queues without prefetch
    std::unique_ptr<PrefixFetch> prefix_;        // without fair queues
};

// The jobs in the fair fetch script's reply {index, payload, ...} (a negative index: a
// suspect); `names` = order.names().
std::vector<UnitOfWork> batch_units(const redis::Reply& reply,
                                    const std::vector<std::string>& names);

// What a fetch does when every queue is paused: sends `pending`, waits a little, finds nothing.
std::optional<UnitOfWork> wait_all_paused(redis::Connection& conn,
                                          std::vector<redis::Command>& pending, int seconds);
// ARGV for the fair fetch script (fair_fetch.hpp): the count, the number of queues, then one
// queue order per job as 1-based indexes into order.names() (a single order in strict mode,
// reused for every job; paused queues padded with 0). Each job of a batch gets its own
// weighted draw, so a batch keeps the shares of one-at-a-time fetch.
void batch_order_args(const QueueOrder& order, std::mt19937_64& rng, size_t count,
                      std::vector<std::string>& args);

// Sends `pending` and then `command` in one write and returns `command`'s reply (throwing
// ReplyError if it is an error); `pending` is cleared once sent, whatever its replies.
redis::Reply command_after(redis::Connection& conn, std::vector<redis::Command>& pending,
                           const redis::Command& command);

}  // namespace kiqd
