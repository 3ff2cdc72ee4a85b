#pragma once
// FetchBuffer: the process-wide local buffer of a batched fetch (reliable_fetch.batch_size > 1,
// or basic fetch with prefetch > 1). One processor thread at a time refills it with one round
// trip that moves up to N jobs out of the queues; the others wait for that refill instead of
// asking Redis themselves, then take the buffered jobs one by one without a round trip. When the
// buffer runs low (below N/2) the thread that notices refills ahead. It also
// holds the acknowledgements that reliable fetch defers (successful jobs whose LREM rides along
// with the next refill), so that orphan recovery can tell a buffered or finished-but-unacked job
// in this process's working list from a stranded one.
// Shared by all processor threads; every member is guarded by one mutex.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "kiqd/fetcher.hpp"

namespace kiqd {

class FetchBuffer {
  public:
    using Refill = std::function<std::vector<UnitOfWork>(std::vector<UnitOfWork>& acks)>;

    // `low_water`: a thread that takes a job and leaves fewer than this buffered refills at once
    // (before returning its job), while the others go on with the rest. 0: only when empty.
    explicit FetchBuffer(size_t low_water = 0) : low_water_(low_water) {}

    // Takes a buffered job, or — when the buffer is empty and no other thread is refilling —
    // calls `refill` (without the lock) and keeps everything it returned but the first. While
    // another thread refills, waits for it (at most `wait`). `refill` gets the deferred
    // acknowledgements to send in the same write; if it throws they are kept for the next
    // write. Returns nullopt when nothing came; `drained` then says whether this thread's own
    // refill found every queue empty (false: it only waited for another thread's refill).
    std::optional<UnitOfWork> take_or_refill(const Refill& refill, std::chrono::milliseconds wait,
                                             bool& drained);
    // Records a successful job whose acknowledgement is deferred to the next refill.
    void defer_ack(UnitOfWork unit);
    // Every buffered job and every deferred acknowledgement, removing them (shutdown).
    std::vector<UnitOfWork> take_buffered();
    std::vector<UnitOfWork> take_acks();
    // Gives back acknowledgements whose write failed.
    void restore_acks(std::vector<UnitOfWork> acks);
    // Payloads of buffered jobs and of deferred acknowledgements (they are still in the working
    // list, and no processor is running them).
    std::vector<std::string> held_payloads() const;
    size_t buffered() const;

  private:
    // Runs `refill` without the lock (held on entry and on return), sending the deferred
    // acknowledgements; if it throws, they and `taken` (a job this thread already took) go
    // back into the buffer.
    std::vector<UnitOfWork> refill_unlocked(std::unique_lock<std::mutex>& lock,
                                            const Refill& refill, std::optional<UnitOfWork>& taken);

    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<UnitOfWork> jobs_;
    std::vector<UnitOfWork> acks_;
    bool refilling_ = false;
    size_t low_water_;
};

}  // namespace kiqd
