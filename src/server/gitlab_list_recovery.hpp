#pragma once
// GitlabListRecovery: the jobs gitlab-sidekiq-fetcher's reliable fetch left in flight in Ruby
// Sidekiq processes that are gone, run again under kiqd as the gem's own cleanup would run them.
// The gem keeps a fetched job in `working:queue:Q:HOST:PID:NONCE` (legacy: without the nonce)
// while it runs, and its process renews `reliable-fetcher-heartbeat-HOST-PID-NONCE` (60 s). For
// a list whose heartbeat is gone, each job, oldest first, gets `interrupted_count` + 1 and goes
// back to the front of its queue, or, once the count reaches its `max_retries_after_interruption`
// (the job's, else the gem's default of 3; negative: never), to the gem's `interrupted` set. Each
// job moves in one script call that first checks it is still at the list's end, so that a Ruby
// process running the gem's own cleanup at the same time never gets the same job too.
// Started by the Launcher when the app's runner reports the gem; its own thread (PeriodicWorker,
// every reliable_fetch.orphan_check_interval) and connection.
#include <spdlog/logger.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/periodic_worker.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"
#include "kiqd/redis/script.hpp"

namespace kiqd {

class GitlabListRecovery {
  public:
    GitlabListRecovery(const Keys& keys, redis::ConnectionOptions options,
                       std::chrono::milliseconds interval, spdlog::logger& log);
    ~GitlabListRecovery();
    void start();
    void stop();

    struct Counts {
        size_t lists = 0, requeued = 0, quarantined = 0;
    };
    // One pass over every working list of the gem. Public for tests.
    Counts pass(redis::Connection& conn);

  private:
    void round();
    // Moves the jobs of one dead process's list; adds to `counts`.
    void drain(redis::Connection& conn, const std::string& list, const std::string& queue_key,
               Counts& counts);

    const Keys& keys_;
    redis::ConnectionOptions options_;
    std::chrono::milliseconds interval_;
    spdlog::logger& log_;
    redis::Script move_;
    std::unique_ptr<redis::Connection> conn_;
    PeriodicWorker worker_;
};

}  // namespace kiqd
