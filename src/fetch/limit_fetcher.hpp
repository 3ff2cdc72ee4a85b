#pragma once
// LimitFetcher: Sidekiq's basic fetch with sidekiq-limit_fetch's queue limits, in the gem's own
// Redis keys, so that kiqd processes and Ruby processes running the gem share every limit
// (docs/configuration.md#queue-limits). Per fetch, like the gem:
//   1. one script call takes, for each queue of this fetch's order that is not paused
//      (limit_fetch:pause:Q), under its limit (limit_fetch:limit:Q, counted by the entries of
//      limit_fetch:probed:Q), under its process limit (limit_fetch:process_limit:Q, this
//      process's entries there) and not blocked (limit_fetch:block:Q), a place: this process's
//      id pushed onto limit_fetch:probed:Q;
//   2. BRPOP over the queues it got a place in (nothing to try: a 2 s wait, as the gem's);
//   3. the places of the other queues are given back (LREM), and the job's queue notes it busy
//      (limit_fetch:busy:Q).
// The job's place and its busy note are given back with its outcome (acknowledgement), when it
// is put back in its queue, or by LimitFetchMonitor when this process is gone.
// Shared by the processor threads (const, no state of its own but the script).
//
// LimitFetchMonitor: the gem's heartbeat (limit:heartbeat:ID for 20 s, in the set
// limit:processes, every 5 s) and its cleanup of processes whose heartbeat is gone (their
// places and busy notes in this process's queues); at start, the limits of kiqd's config
// written to the gem's keys. Its own thread (PeriodicWorker) and connection.
#include <spdlog/logger.h>

#include <memory>
#include <string>
#include <vector>

#include "common/periodic_worker.hpp"
#include "fetch/fetcher.hpp"
#include "kiqd/config.hpp"

namespace kiqd {

class LimitFetcher final : public Fetcher {
  public:
    static constexpr int kTimeoutSeconds = 2;  // the gem's (Sidekiq's BasicFetch::TIMEOUT)

    // `id`: this process's name in the gem's lists (its Sidekiq identity).
    LimitFetcher(const Keys& keys, const QueueOrder& order, std::string id);
    using Fetcher::retrieve_work;
    std::optional<UnitOfWork> retrieve_work(redis::Connection& conn, std::mt19937_64& rng,
                                            size_t slot,
                                            std::vector<redis::Command>& pending) const override;
    std::vector<redis::Command> with_acknowledgement(
        const UnitOfWork& unit, std::vector<redis::Command> outcome) const override;
    std::vector<redis::Command> unmark_started_commands(const UnitOfWork& unit) const override;
    std::vector<redis::Command> requeue_commands(
        const std::vector<UnitOfWork>& units) const override;

  private:
    // Gives back the job's place and busy note.
    void append_release(const std::string& queue, std::vector<redis::Command>& out) const;

    const Keys& keys_;
    const QueueOrder& order_;
    std::string id_;
    std::unique_ptr<redis::Script> acquire_;
};

class LimitFetchMonitor {
  public:
    LimitFetchMonitor(const Config& config, const Keys& keys, std::vector<std::string> queues,
                      std::string id, redis::ConnectionOptions options, spdlog::logger& log);
    ~LimitFetchMonitor();
    // Writes the config's limits and blocks, then beats every 5 s. Main thread, before the
    // processors start.
    void start();
    // Stops beating and takes this process out of limit:processes. Idempotent.
    void stop();

  private:
    void round();
    void write_limits(redis::Connection& conn);

    const LimitFetchConfig& config_;
    const Keys& keys_;
    std::vector<std::string> queues_;
    std::string id_;
    redis::ConnectionOptions options_;
    spdlog::logger& log_;
    std::unique_ptr<redis::Connection> conn_;
    PeriodicWorker worker_;
};

}  // namespace kiqd
