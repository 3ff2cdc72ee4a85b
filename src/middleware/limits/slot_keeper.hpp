#pragma once
// SlotKeeper: the background half of the concurrency limit (concurrency_limit.hpp). Processor
// threads register the slot their job holds and unregister it when they release it (under a
// mutex; no Redis call). The keeper's own thread, with its own connection,
//   * every 250 ms pushes the expiry of each slot a third of whose TTL has passed since its
//     last extension slot_ttl ahead (only while the slot still exists), in one script call for
//     all of them, so a running job never loses its slot while a dead process's slots expire;
//   * every check_interval, if it wins the fleet-wide lock (SET NX PX interval), runs the check
//     script on every scope in `kiqd:concurrency:scopes`: expired slots are dropped, parked
//     jobs are moved back to their queues into the free slots, and a scope with neither slots
//     nor parked jobs is forgotten.
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "common/periodic_worker.hpp"
#include "kiqd/config.hpp"
#include "kiqd/job_context.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"
#include "kiqd/redis/script.hpp"

namespace kiqd {

class SlotKeeper {
  public:
    SlotKeeper(const Keys& keys, redis::ConnectionOptions options, ConcurrencyLimitsConfig config,
               std::string identity, spdlog::logger& log);
    ~SlotKeeper();
    void start();
    void stop() noexcept;  // idempotent; joins the thread

    // Called by processor threads around a job that holds a slot.
    uint64_t hold(std::string slots_key, std::string member);
    void release(uint64_t id);
    size_t held() const;

    // One extension round / one check pass (→ jobs moved back). Public for tests.
    size_t extend_due(redis::Connection& conn, bool all = false);
    size_t check(redis::Connection& conn, bool take_lock = true);

    const ConcurrencyLimitsConfig& config() const { return config_; }

  private:
    struct Held {
        std::string key, member;
        std::chrono::steady_clock::time_point extended;
    };
    void round();  // one round of the keeper thread

    const Keys& keys_;
    redis::ConnectionOptions options_;
    ConcurrencyLimitsConfig config_;
    std::string identity_;
    spdlog::logger& log_;
    redis::Script extend_script_;
    redis::Script check_script_;
    mutable std::mutex mutex_;
    std::map<uint64_t, Held> slots_;         // guarded by mutex_
    uint64_t next_id_ = 1;                   // guarded by mutex_
    std::optional<redis::Connection> conn_;  // keeper thread only, from start() to stop()
    DueTime next_check_;                     // keeper thread only
    PeriodicWorker worker_;                  // last: its thread ends before the members it uses go
};

}  // namespace kiqd
