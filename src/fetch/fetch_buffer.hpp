#pragma once
// FetchBuffer: the process-wide local buffer of a batched fetch (reliable_fetch.batch_size > 1,
// or basic fetch with prefetch > 1). A processor thread refills it with one round trip that
// moves up to N jobs out of the queues; threads that find it empty while a refill is on its way
// wait for that refill instead of asking Redis themselves, then take the buffered jobs one by
// one without a round trip. The thread that notices the buffer running low refills ahead, so
// that the round trip overlaps the other threads' work. How far ahead is measured, not fixed:
// the buffer keeps jobs plus refills in flight above (3 × jobs taken per second × refill time),
// at least N/2, with up to `max_refills` refills in flight — one on loopback, where a round trip
// costs less than a job; several on a slow link (at +1 ms per round trip one refill of 50 lasts
// as long as ~100 no-op jobs, so a single refill in flight caps a process at ~40k jobs/s). It also
// holds the acknowledgements that reliable fetch defers (successful jobs whose LREM rides along
// with the next refill), so that orphan recovery can tell a buffered or finished-but-unacked job
// in this process's working list from a stranded one.
// When threads wait for refills (more threads than jobs buffered: c100 on 2 cores), a woken
// thread takes a pile of jobs at once: the first to run, the others into its own pile, which it
// runs next without the shared lock; a refill wakes one waiter per pile. A pile holds about
// kPileWork of work by the thread's measured job time (no-op jobs: up to kMaxPile; jobs of a
// 500 µs or more: none), so that a c100 pool on 2 cores wakes about one thread per refill
// rather than one per 8 jobs (each wake-up is a sleep and a wake, ~0.3 context switches per job
// at c100 with piles of 8), and a piled job waits at most about kPileWork longer than with a
// thread of its own. Jobs never wait in a pile behind a long job while another thread is free:
// a thread that finds the shared buffer empty takes the newer half of another thread's pile
// before it waits or refills, and piles are used only while jobs are short (a thread's jobs run
// under 1 ms on average). A successful job's deferred acknowledgement goes to its thread's own
// list first (no shared lock per job), and joins the shared list on the thread's next visit to
// the shared buffer (at the latest after a pile), in time for the next refill. A job that ran
// kAckDelay or longer on a thread of long jobs is not deferred at all, and the ack
// watcher (server/ack_flusher.hpp) sends those deferred longer than kAckDelay: a refill comes
// within a few short jobs, but not while every thread runs a long job after short ones.
// Waiting threads wake newest first: the thread that parked last wakes first, so that at c100
// the same few threads (warm caches, their piles' measured pace) do the work while the others
// stay parked, instead of the refills rotating through all hundred.
// Shared by all processor threads; every member is guarded by one mutex, except each pile (and
// its thread's acknowledgements), guarded by its own (taken after the shared one when both are
// held).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "fetch/fetcher.hpp"

namespace kiqd {

class FetchBuffer {
  public:
    using Refill = std::function<std::vector<UnitOfWork>(std::vector<UnitOfWork>& acks)>;

    // The most jobs a pile holds, and the work (by the thread's measured job time) it holds.
    static constexpr size_t kMaxPile = 64;
    static constexpr double kPileWork = 0.0005;
    static constexpr size_t kNoSlot = static_cast<size_t>(-1);

    // `batch`: the jobs one refill asks for. `max_refills`: how many may be in flight at once.
    // `threads`: processor slots 0..threads-1 get a pile each (0: no piles).
    explicit FetchBuffer(size_t batch, size_t max_refills = 1, size_t threads = 0);
    ~FetchBuffer();

    // Takes a buffered job, or — when the buffer is empty and no refill is in flight — calls
    // `refill` (without the lock), keeps what it returned and takes the first job. A thread that
    // finds the buffer running low puts its job back for the others, refills ahead the same way,
    // and then takes the oldest buffered job. While the buffer is empty and a refill is in
    // flight, waits for it (at most `wait`). `refill` gets the deferred
    // acknowledgements to send in the same write; if it throws they are kept for the next
    // write. Returns nullopt when nothing came; `drained` then says whether this thread's own
    // refill found every queue empty (false: it only waited for another thread's refill).
    // `slot`: the calling processor's (its pile), or kNoSlot.
    std::optional<UnitOfWork> take_or_refill(const Refill& refill, std::chrono::milliseconds wait,
                                             bool& drained, size_t slot = kNoSlot);
    // The longest a deferred acknowledgement should wait: a job that ran this long is
    // acknowledged at once (defer_ack returns false), and the ack watcher sends what waited
    // this long (oldest_ack).
    static constexpr std::chrono::milliseconds kAckDelay{5};
    // Records a successful job whose acknowledgement is deferred to the next refill; `slot`:
    // the calling processor's (kept in its own list until it next takes from the shared buffer).
    // False, with nothing recorded, when the slot's job ran kAckDelay or longer since its take
    // and the thread's jobs are not short (short_jobs): the caller acknowledges it now. Only
    // the slot's own thread may pass its slot.
    bool defer_ack(UnitOfWork unit, size_t slot = kNoSlot);
    // The ack watcher's side. When the oldest deferred acknowledgement (shared or in a
    // thread's list) was deferred; nullopt when there is none.
    std::optional<std::chrono::steady_clock::time_point> oldest_ack() const;
    // `wake` is called (from a processor thread) when an acknowledgement is deferred while the
    // watcher is idle. Set before any processor starts.
    void set_ack_watcher(std::function<void()> wake) { ack_wake_ = std::move(wake); }
    // Marks the watcher idle when no acknowledgement is deferred (true); false, and not idle,
    // when one is. An idle watcher is woken by the next deferral.
    bool ack_watcher_idle();
    // Every buffered job and every deferred acknowledgement, removing them (shutdown).
    std::vector<UnitOfWork> take_buffered();
    std::vector<UnitOfWork> take_acks();  // the shared list and every thread's
    // Puts a job taken from the buffer back at its front (its start could not be checked:
    // reliable_fetcher.cpp), so that the next take gets it again.
    void put_back(UnitOfWork unit);
    // Gives back acknowledgements whose write failed.
    void restore_acks(std::vector<UnitOfWork> acks);
    // Payloads of buffered jobs and of deferred acknowledgements (they are still in the working
    // list, and no processor is running them).
    std::vector<std::string> held_payloads() const;
    size_t buffered() const;  // shared buffer and piles
    size_t refills_in_flight() const;
    size_t waiting() const;  // threads waiting for a refill in flight
    // Whether `slot`'s thread measured its jobs as short (under 1 ms on average); only that
    // thread may ask (it alone writes the measure).
    bool short_jobs(size_t slot) const {
        const Pile* pile = pile_of(slot);
        return pile && pile->short_jobs();
    }
    // Whether `slot`'s thread measured its jobs short enough for its refills to take locks and
    // slots ahead (refill_acquirer.hpp): under kAcquireAheadJob on average. Only that thread may
    // ask.
    bool acquires_ahead(size_t slot) const {
        const Pile* pile = pile_of(slot);
        return pile && pile->measured && pile->job_seconds < kAcquireAheadJob;
    }
    // Records that `slot`'s thread took a job outside the buffer (the blocking pop once every
    // queue was empty), so that its next take measures that job's run like a buffered one's.
    // Without it, after an idle spell each thread's first refill counted its jobs as unmeasured
    // (not short: no piles, nothing acquired ahead). Only the slot's own thread may call it.
    void note_taken(size_t slot) {
        if (Pile* pile = pile_of(slot)) pile->last = std::chrono::steady_clock::now();
    }
    // Jobs in the threads' piles.
    size_t piled() const { return piled_.load(std::memory_order_relaxed); }

  private:
    // Runs `refill` without the lock (held on entry and on return), sending the deferred
    // acknowledgements; if it throws, they go back for the next write.
    std::vector<UnitOfWork> refill_unlocked(std::unique_lock<std::mutex>& lock,
                                            const Refill& refill);
    // Whether the buffer plus the refills in flight are below what the measured pace needs.
    bool running_low() const;
    // Updates the measured pace after a refill that took `took` (lock held).
    void record_refill(std::chrono::steady_clock::duration took);
    struct Pile {
        std::mutex mutex;
        std::deque<UnitOfWork> jobs;
        std::vector<UnitOfWork> acks;  // deferred by this slot's thread, not yet shared
        std::chrono::steady_clock::time_point acks_since{};  // when acks' first was deferred
        // Only the owner thread touches these: when its last take returned a job, and the
        // moving average of the time from there to its next take (its job's run), in seconds.
        std::chrono::steady_clock::time_point last{};
        // Not short until measured: a thread's first jobs (a start with a
        // full queue of long jobs) are taken one at a time.
        double job_seconds = kShortJob;
        bool measured = false;  // job_seconds holds at least one job's time
        bool short_jobs() const { return job_seconds < kShortJob; }
        // The jobs one take may hand this thread: 1 (no pile) unless its jobs are short.
        size_t limit() const;
        // Where the slot's thread parks while it waits for a refill. `woken`: set by the thread
        // that wakes it (shared lock held), which also takes it off `parked_`.
        std::condition_variable cv;
        bool woken = false;
    };
    Pile* pile_of(size_t slot) const { return slot < piles_.size() ? piles_[slot].get() : nullptr; }
    // take_or_refill once `pile` (null: none) has measured the caller's last job.
    std::optional<UnitOfWork> take_or_refill_unlocked(const Refill& refill,
                                                      std::chrono::milliseconds wait, bool& drained,
                                                      Pile* pile);
    // The newer half of some other pile (lock held): the first to run, the rest into `thief`'s
    // pile (null: only the newest job is taken); nullopt when every pile is empty.
    std::optional<UnitOfWork> steal(Pile* thief);
    // Moves `pile`'s deferred acknowledgements to the shared list (lock held).
    void share_acks(Pile* pile);
    // After the first acknowledgement went into an empty list: wakes an idle ack watcher.
    void first_ack_deferred();
    // Puts acknowledgements back in the shared list, deferred since `since` (lock held).
    void requeue_acks(std::vector<UnitOfWork>& acks, std::chrono::steady_clock::time_point since);
    // Takes the front job, and with waiters about, up to limit() - 1 more into `pile` (lock held).
    std::optional<UnitOfWork> take_locked(Pile* pile);
    // Waits on `pile`'s own condition (parked, newest last) or, without a pile, on the shared one,
    // until woken or `deadline` (lock held on entry and on return).
    std::cv_status park(std::unique_lock<std::mutex>& lock, Pile* pile,
                        std::chrono::steady_clock::time_point deadline);
    // Takes up to `n` waiters off the stack, newest first, and says how many pileless waiters to
    // wake besides (lock held); `notify` then wakes them without the lock (a pile outlives every
    // wait, so a late notification is only a spurious wake-up).
    struct Wake {
        std::vector<Pile*> piles;
        size_t shared = 0;
        bool all_shared = false;
    };
    Wake pick_waiters(size_t n);
    void notify(const Wake& wake);

    mutable std::mutex mutex_;
    std::condition_variable cv_;  // where threads without a pile wait
    size_t shared_waiting_ = 0;   // ... and how many do
    std::vector<Pile*> parked_;   // piles' threads waiting for a refill, newest last
    std::deque<UnitOfWork> jobs_;
    std::vector<UnitOfWork> acks_;
    std::chrono::steady_clock::time_point acks_since_{};  // when acks_' oldest was deferred
    std::function<void()> ack_wake_;                      // set before the processors start
    std::atomic<bool> ack_idle_{false};  // the ack watcher waits for a first deferral
    size_t refills_ = 0;                 // in flight
    size_t waiting_ = 0;                 // threads waiting in take_or_refill for a refill in flight
    std::vector<std::unique_ptr<Pile>> piles_;  // by slot; the vector itself is immutable
    std::atomic<size_t> piled_{0};              // jobs in all piles
    // Piles only while a thread's jobs run shorter than this on average, so that a pile never
    // holds jobs back behind long ones for long.
    static constexpr double kShortJob = 0.001;
    // What a refill acquires ahead is held while its jobs wait in the buffer: about a refill's
    // jobs over the threads, times a job's time — at 5 ms, 50 jobs and 10 threads, 25 ms. The
    // time between a thread's takes also counts its waits for a core: ten threads of no-op
    // jobs on two loaded cores measure 1-2 ms, which the piles' 1 ms would read as long and
    // send every job to its own per-job acquire, slowing the threads further.
    static constexpr double kAcquireAheadJob = 0.005;
    const size_t batch_;
    const size_t low_water_;
    const size_t max_refills_;
    // The pace, as moving averages: jobs taken per second and seconds per refill.
    size_t taken_since_sample_ = 0;
    std::chrono::steady_clock::time_point sample_start_ = std::chrono::steady_clock::now();
    double take_rate_ = 0;
    double refill_seconds_ = 0;
};

}  // namespace kiqd
