#pragma once
// Redis's maxmemory-policy, read for the warning that an evicting Redis can lose jobs. Queues,
// the schedule and retry sets, reliable fetch's working lists, unique locks and concurrency
// slots are all keys: a Redis that evicts at maxmemory (allkeys-*, volatile-*) drops them in
// silence, so only `noeviction` is safe (Sidekiq warns the same way). read_policy() asks
// CONFIG GET, and where a managed Redis refuses it (unknown or renamed command, no permission)
// reads INFO memory's maxmemory_policy; nullopt when neither says. EvictionPolicyWatch logs one
// line per change of what it read: at start (the first heartbeat), then at each beat.
// Used by the heartbeat (its thread), `kiqd check-config` and the metrics server (its thread),
// each with its own connection and watch.
#include <spdlog/logger.h>

#include <optional>
#include <string>

#include "kiqd/redis/connection.hpp"

namespace kiqd {

// The policy Redis reports; nullopt when it cannot be told. Throws redis::Error when Redis
// cannot be reached.
std::optional<std::string> read_maxmemory_policy(redis::Connection& conn);

// What is wrong with `policy` for kiqd (nullopt: noeviction, nothing). `policy` nullopt: the
// line that says it cannot be told.
std::optional<std::string> eviction_warning(const std::optional<std::string>& policy);

class EvictionPolicyWatch {
  public:
    explicit EvictionPolicyWatch(spdlog::logger& log) : log_(log) {}
    // Reads the policy and logs a warning when it changed to something other than noeviction
    // (or to unknown), and an info line when it became noeviction after a warning. Throws
    // redis::Error when Redis cannot be reached (the caller reports outages).
    void check(redis::Connection& conn);

  private:
    spdlog::logger& log_;
    bool checked_ = false;
    std::optional<std::string> last_;
};

}  // namespace kiqd
