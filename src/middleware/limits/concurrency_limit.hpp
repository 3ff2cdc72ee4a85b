#pragma once
// Concurrency limit: a server middleware that lets at most N jobs of a class — or of one tenant
// of it — run at once across every kiqd process on the Redis, for `handlers: {C:
// {concurrency_limit: N}}` or `{concurrency_limit: {limit: N, by: tenant}}`. Excess jobs wait in
// Redis, not in a worker thread, and come back as slots free up. The model is GitLab's
// (docs/data-model.md#concurrency-limit-keys: an executing set, a buffer list, a resumer), made
// crash-safe.
//
// Per scope (limit_scope.hpp: "<Class>" or "<Class>:tenant:<t>"):
//   kiqd:concurrency:<scope>:slots    ZSET member → expiry (epoch ms, Redis's clock):
//       "<identity>|<jid>|<token>"  a running job; the SlotKeeper (slot_keeper.hpp) pushes its
//                                   expiry slot_ttl ahead every third of slot_ttl, so the slot
//                                   of a process that died (kill -9, host lost) expires within
//                                   slot_ttl and is taken back by the next script that looks;
//       "@<jid>"                    a slot reserved for a parked job moved back to its queue;
//                                   the job takes it over when it is fetched (or it expires).
//   kiqd:concurrency:<scope>:waiting  LIST of parked payloads (unchanged), oldest first.
//   kiqd:concurrency:scopes           HASH scope → limit: the scopes that have parked jobs,
//                                     for the checker (set when a job parks).
//
// Acquire (one Lua script, one round trip): drop expired slots; a job holding a reservation
// takes it over; otherwise parked jobs are first moved back (each with a reservation) while
// slots are free, so jobs keep their order; then the job takes a free slot, or is appended to
// the waiting list — atomically, before the processor returns, so a crash at any point loses
// nothing; with reliable fetch the same script takes it out of the working list, so a crash
// cannot leave it both parked and recoverable (run twice).
// Release (after the run, success or failure, sent with the processor's next command): frees
// the slot and moves as many parked jobs back to the front of their queues as slots are free.
// The SlotKeeper's periodic check (one process at a time) does the same for every scope, which
// covers slots freed by expiry rather than by a release.
//
// Built only when some class has a concurrency_limit; other classes pay one hash lookup.
// One instance is shared by all processor threads; per-job state lives on the stack.
#include <optional>
#include <string>
#include <unordered_map>

#include "kiqd/config.hpp"
#include "kiqd/middleware_chain.hpp"
#include "kiqd/redis/script.hpp"
#include "middleware/limits/slot_keeper.hpp"

namespace kiqd {

class ConcurrencyLimitMiddleware final : public ServerMiddleware {
  public:
    ConcurrencyLimitMiddleware(const Config& config, const Keys& keys, SlotKeeper& keeper,
                               std::string identity);
    std::string_view name() const override { return "concurrency_limit"; }
    void call(JobContext& ctx, const Next& next) const override;

    // True when some class in `config` has a concurrency_limit.
    static bool configured(const Config& config);

  private:
    const Config& config_;
    const Keys& keys_;
    SlotKeeper& keeper_;
    std::string identity_;
    // The classes with a concurrency_limit, by name: their spec and `fair_tenant: {arg: N}` (where
    // `by: tenant` finds a tenant the payload does not name). The Config outlives the chain.
    std::unordered_map<std::string, const ClassSpec*> classes_;
    redis::Script acquire_script_;
    redis::Script release_script_;
};

}  // namespace kiqd
