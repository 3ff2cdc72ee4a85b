#pragma once
// RefillAcquirer and AcquiredSet: what a batched refill acquires for its jobs ahead of their
// middlewares. A unique-jobs EXEC lock or a concurrency slot used to cost one Redis
// round trip per job, made by the job's middleware just before it ran. With batched reliable
// fetch the refilling thread knows a whole refill's jobs at once, so it acquires for all of
// them in one script call (RefillAcquirer::acquire, implemented by BatchAcquire in
// src/middleware/batch_acquire.hpp) before they enter the fetch buffer, and each job carries
// what it got (UnitOfWork::acquired) into its middleware, which claims it and makes no round
// trip of its own.
//
// Only the easy case is acquired ahead: a free lock or a free slot with nobody parked. A job
// whose acquire would be refused (lock busy, no slot, parked jobs, a reservation to take over,
// a key of the wrong type) gets nothing, and its middleware does today's per-job acquire, so
// duplicates, parking and conflict strategies behave exactly as without this.
//
// What a job holds without having run (given back at stop, requeued after quiet, taken by the
// cpu gate's close, or never reaching its middleware: an invalid payload, a job an outer
// middleware parked) is released by whoever puts it back (the fetcher's requeue, the
// processor after the chain): release_unclaimed. A crash leaves locks and slots to expire by
// their TTL (their keepers no longer extend them), as for a running job.
//
// An AcquiredSet is touched by one thread at a time: the refilling thread fills it, then the
// thread that takes the job (or the one that puts it back) claims or releases its items.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fetch/fetcher.hpp"
#include "kiqd/job.hpp"

namespace kiqd {

struct LockSpec;  // middleware/unique/unique_jobs.hpp

struct Acquired {
    // fair_tenant: registered in its tenant's window and staying in its queue (nothing held;
    // given back unclaimed, the registration is taken back: it leaves the window).
    enum class Kind : uint8_t { slot, exec_lock, fair_tenant };
    Kind kind = Kind::slot;
    std::string key;      // the slots ZSET, or the EXEC lock's key
    std::string member;   // the slot member, the lock owner, or the registered member
    std::string waiting;  // a slot: its scope's waiting list
    long long limit = 0;  // a slot: its scope's limit
    uint64_t held = 0;    // its registration with the SlotKeeper / LockKeeper
    // The scope had room to spare (a slot: at most half the limit taken, nobody parked; a lock:
    // always): its release may wait for the next refill instead of a round trip of its own.
    bool roomy = false;
    bool claimed = false;  // a middleware took it over and releases it
    // An EXEC lock: the job's lock options as the refill resolved them from its payload (the
    // same payload and configuration as the middleware's), so the middleware does not resolve
    // and digest them a second time.
    std::shared_ptr<const LockSpec> lock{};
};

struct AcquiredSet {
    std::vector<Acquired> items;
    // The job as the refill parsed it from the unit's payload (with the processor's limits), so
    // that the processor does not parse the same payload a second time: set whenever `items`
    // is not empty. The processor moves it out (it is then empty).
    std::optional<Job> job{};
    // The unclaimed item of `kind` on `key`, now claimed; null when there is none.
    Acquired* claim(Acquired::Kind kind, const std::string& key);
    // The first unclaimed item of `kind`, left unclaimed; null when there is none.
    const Acquired* find(Acquired::Kind kind) const;
};

class RefillAcquirer {
  public:
    virtual ~RefillAcquirer() = default;
    // On the refilling thread, once a refill's jobs are in the working lists and before any
    // other thread can take them: at most one round trip on `conn`, attaching what it took to
    // each unit's `acquired`. Throws redis::Error (nothing is attached then).
    virtual void acquire(redis::Connection& conn, std::vector<UnitOfWork>& units) const = 0;
    // Releases what `set` holds unclaimed (a job given back without running): unregisters it
    // from its keeper and appends the idempotent commands that free it in Redis.
    virtual void release_unclaimed(AcquiredSet& set, std::vector<redis::Command>& out) const = 0;
    // On the refilling thread, before a refill's write: replaces the lock and slot releases
    // deferred to it by one script call (release_fold.hpp). Never throws.
    virtual void fold_releases(redis::Connection& /*conn*/,
                               std::vector<redis::Command>& /*releases*/) const {}
};

}  // namespace kiqd
