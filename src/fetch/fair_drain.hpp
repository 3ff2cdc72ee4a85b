#pragma once
// What an operator and /metrics need of a fair queue (fair_fetch.hpp) besides fetching:
//
// * drain_fair_queue — turning fair fetch off: every job of the queue's tenant lists goes back
//   into the plain list `queue:<q>`, in enqueue order (each tenant list is in order; the lists
//   are merged by `enqueued_at`, a job without one keeping its place after the job before it
//   in its list), in front of the jobs still in the plain list (those came later), and the
//   ring, weights counters and `queues` entries are removed. One Lua script: nothing is lost or
//   doubled if the caller dies, and Redis is busy for its duration (about 1 s per 100,000
//   jobs on a small VM). `kiqd fair-fetch drain <queue>`, and the daemon at start for a queue
//   that is no longer fair but still has tenant lists.
// * fair_backlog — per-tenant backlog and the age of each tenant's oldest job, for the N
//   tenants with the most jobs, the rest summed as "other" (bounded cardinality for /metrics).
//
// Stateless functions; each call uses the connection it is given (any thread).
#include <string>
#include <vector>

#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

// Jobs moved back into `queue:<queue>` (0 when the queue has no tenant lists).
long long drain_fair_queue(redis::Connection& conn, const Keys& keys, const std::string& queue);

// Whether `queue` has fair-fetch state (a ring) in Redis.
bool has_fair_state(redis::Connection& conn, const Keys& keys, const std::string& queue);
// Those of `queues` that have such state, asked in one pipeline.
std::vector<std::string> with_fair_state(redis::Connection& conn, const Keys& keys,
                                         const std::vector<std::string>& queues);

struct FairTenantBacklog {
    std::string tenant;
    long long jobs = 0;
    double oldest_enqueued_at = 0;  // epoch seconds of the oldest job's enqueued_at; 0: unknown
};

struct FairQueueBacklog {
    std::string queue;
    long long unsplit = 0;               // jobs still in the plain list
    std::vector<FairTenantBacklog> top;  // most jobs first
    long long other_tenants = 0;
    long long other_jobs = 0;
};

FairQueueBacklog fair_backlog(redis::Connection& conn, const Keys& keys, const std::string& queue,
                              size_t top_n);

}  // namespace kiqd
