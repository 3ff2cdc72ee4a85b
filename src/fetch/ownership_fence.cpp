#include "fetch/ownership_fence.hpp"

#include <algorithm>

namespace kiqd {
namespace {

// Renews the liveness key and the working list's registration, then says whether the job is
// still in the list. One script, so that no orphan recovery (which requeues a job only while
// its owner's key is missing, in one script too) can come between the check and the renewal.
// The list is scanned in chunks with LRANGE rather than LPOS, which older Redis lacks; a
// working list holds the buffer, the running jobs and the unacknowledged ones (a few hundred).
// KEYS[1] -> the liveness key ("kiqd:reliable:alive:<identity>")
// KEYS[2] -> the working-lists registry ("kiqd:reliable:working")
// KEYS[3] -> the working list
// KEYS[4] -> the owner's recoveries counter ("kiqd:reliable:recoveries:<identity>")
// ARGV[1] -> liveness_ttl in milliseconds
// ARGV[2] -> the payload
// Returns {found (1 or 0), the recoveries counter}.
// The renewal is PEXPIRE when the key exists, and the registration only when it is missing:
// Redis out of memory (maxmemory with noeviction) refuses SET and SADD but takes PEXPIRE, and
// once a script has written it lets the rest of it write too.
constexpr const char* kProveScript = R"lua(
if redis.call('pexpire', KEYS[1], ARGV[1]) == 0 then
  redis.call('set', KEYS[1], '1', 'PX', ARGV[1])
end
if redis.call('sismember', KEYS[2], KEYS[3]) == 0 then redis.call('sadd', KEYS[2], KEYS[3]) end
local recoveries = tonumber(redis.call('get', KEYS[4]) or '0')
local n = redis.call('llen', KEYS[3])
for first = 0, n - 1, 200 do
  for _, job in ipairs(redis.call('lrange', KEYS[3], first, first + 199)) do
    if job == ARGV[2] then return {1, recoveries} end
  end
end
return {0, recoveries}
)lua";

}  // namespace

OwnershipFence::OwnershipFence() : prove_script_(kProveScript) {}

void OwnershipFence::observe_recoveries(long long recoveries, Clock::time_point seen) {
    if (recoveries_ >= 0 && recoveries != recoveries_)
        recovered_seen_.store(
            std::max(recovered_seen_.load(std::memory_order_relaxed), ticks(seen)),
            std::memory_order_release);
    recoveries_ = recoveries;
}

void OwnershipFence::renewed(Clock::time_point sent, Clock::time_point replied,
                             std::chrono::milliseconds ttl, long long recoveries) {
    std::lock_guard lock(renew_mutex_);
    observe_recoveries(recoveries, replied);
    ttl_ms_.store(ttl.count(), std::memory_order_relaxed);
    const int64_t until = ticks(sent + ttl);
    // The key was known to live until alive_until_; this refresh landed no later than its
    // reply. A reply after that moment: the key may have been missing in between.
    if (ticks(replied) > alive_until_.load(std::memory_order_relaxed))
        gap_end_.store(std::max(gap_end_.load(std::memory_order_relaxed), ticks(replied)),
                       std::memory_order_release);
    if (until > alive_until_.load(std::memory_order_relaxed))
        alive_until_.store(until, std::memory_order_release);
}

bool OwnershipFence::holds(Clock::time_point fetched_at) const {
    // Never renewed: the fetcher runs without a liveness thread (in-process tests), so there
    // is no key whose lapse could hand its jobs to another process.
    if (ttl_ms_.load(std::memory_order_relaxed) == 0) return true;
    return ticks(fetched_at) > gap_end_.load(std::memory_order_acquire) &&
           ticks(fetched_at) > recovered_seen_.load(std::memory_order_acquire) &&
           ticks(Clock::now()) < alive_until_.load(std::memory_order_acquire);
}

bool OwnershipFence::prove(redis::Connection& conn, std::vector<redis::Command>& pending,
                           const std::string& alive_key, const std::string& registry,
                           const std::string& working_list, const std::string& recoveries_key,
                           const std::string& payload, Clock::time_point fetched_at) {
    const auto ttl = std::chrono::milliseconds(ttl_ms_.load(std::memory_order_relaxed));
    const auto sent = Clock::now();
    auto reply =
        prove_script_.run_after(conn, &pending, {alive_key, registry, working_list, recoveries_key},
                                {std::to_string(ttl.count()), payload});
    if (reply.size() != 2) reply.unexpected("ownership proof: unexpected reply");
    renewed(sent, Clock::now(), ttl, reply[1].integer());
    return reply[0].integer() == 1 &&
           ticks(fetched_at) > recovered_seen_.load(std::memory_order_acquire);
}

}  // namespace kiqd
