#pragma once
// FairFetch: the fetch step of `fair_fetch:` queues (docs/fair-fetch.md). A fair queue's jobs
// are served tenant by tenant, whoever pushed them:
//
// * Split. The first time a fetch script touches a fair queue it moves up to `split_max` jobs
//   from the plain list `queue:<q>` (oldest first) into one list per tenant,
//   `queue:<q>@t:<tenant>`, each a Sidekiq queue in its own right: the name is added to the
//   `queues` set, so Sidekiq's API and Web UI count and show every job. The tenant is args[N]
//   or a top-level payload key, read with cjson; a payload that is not JSON, or has no usable
//   tenant, goes to the tenantless bucket `queue:<q>@t:` (never dropped). Beyond `max_tenants`
//   active tenants, new tenants share that bucket too.
// * Ring. `kiqd:fair:<q>:ring` (a LIST) holds the tenants whose list is not empty; its tail is
//   the tenant served next. A fetch reads as many tenants from the tail as it needs jobs (one
//   LRANGE), pops each one's oldest job in turn, and writes the turn back at the end of the
//   call (one LTRIM + LPUSH: served tenants to the head after `weight` jobs in a row, counted
//   across calls in the HASH `kiqd:fair:<q>:served`; emptied tenants out of the ring and
//   `queues`). With reliable fetch, the call's jobs enter the working list in one LPUSH, in
//   the order taken. The state is in Redis, so the rotation is cluster-wide, and a tenant that
//   vanishes costs nothing.
//
// Both steps run inside the fetch script, so every job is always in exactly one list; a
// kill -9 finds it in the plain queue, a tenant list or a working list. The script takes every
// queue of a process with fair queues, the plain ones too: KEYS are every queue list (and
// working lists), ARGV a full queue order per job (batch_order_args, then fair_args). Paused
// queues are left out of the order as for any queue.
//
// Built once by the launcher from the config; immutable, shared by all processor threads.
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fetch/fetcher.hpp"
#include "kiqd/config.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/script.hpp"

namespace kiqd {

class FairFetch {
  public:
    // Jobs split per fetch script and fair queue at most: well ahead of any batch, so that a
    // new job is split (and so served fairly) soon after it is pushed, while one script never
    // blocks Redis for long (a few ms per thousand jobs).
    static constexpr size_t kSplitMax = 2000;

    FairFetch(const Keys& keys, const QueueOrder& order, const FairFetchConfig& config);

    // The fetch script's source (KEYS and reply: fair_fetch.cpp; ARGV: fair_args).
    static const char* script_source();
    // batch_order_args' ARGV (fetcher.hpp) turned into this script's.
    void fair_args(std::vector<std::string>& args) const;
    // One job, with `keys` (queue lists, plus working lists for reliable fetch), sending
    // `pending` in the same write; nullopt when every queue of this fetch's order is empty.
    std::optional<UnitOfWork> take_one(redis::Connection& conn, std::mt19937_64& rng,
                                       std::vector<redis::Command>& pending,
                                       const std::vector<std::string>& keys) const;
    // Up to `count` jobs in one script call (FetchCombiner: one per waiting thread).
    std::vector<UnitOfWork> take(redis::Connection& conn, std::mt19937_64& rng,
                                 std::vector<redis::Command>& pending,
                                 const std::vector<std::string>& keys, size_t count) const;

    // Key names, for the drain and the metrics (fair_drain.hpp).
    static std::string ring_key(const Keys& keys, const std::string& queue) {
        return keys.prefix() + "kiqd:fair:" + queue + ":ring";
    }
    static std::string served_key(const Keys& keys, const std::string& queue) {
        return keys.prefix() + "kiqd:fair:" + queue + ":served";
    }
    // The Sidekiq queue name of a tenant's list ("default@t:acme").
    static std::string tenant_queue(const std::string& queue, const std::string& tenant) {
        return queue + "@t:" + tenant;
    }

  private:
    const QueueOrder& order_;
    redis::Script script_;
    std::vector<std::string> spec_;  // the fair queues' part of ARGV
};

}  // namespace kiqd
