#pragma once
// What a handler and each middleware see while one job runs: the job, a logger, the processor
// thread's own Redis connection, and the cooperative stop signal of a hard shutdown.
// A JobContext lives on the processor thread's stack for the duration of one job.
#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiqd/deadline.hpp"
#include "kiqd/job.hpp"
#include "kiqd/keys.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

struct Config;
class Client;
struct AcquiredSet;

// Raised once, when the shutdown deadline has passed and running jobs have been pushed back to
// their queues. Handlers that run long should poll stop_requested() or sleep with wait_for(),
// and return (or throw Interrupted) when it fires. Thread-safe.
class StopSignal {
  public:
    void request_stop() {
        {
            std::lock_guard lock(mutex_);
            stopped_ = true;
        }
        cv_.notify_all();
    }
    // Lock-free: processors ask this on every fetch.
    bool stop_requested() const { return stopped_.load(std::memory_order_acquire); }
    // Sleeps for `d` or until a stop is requested; returns true when stopped.
    template <class Rep, class Period>
    bool wait_for(std::chrono::duration<Rep, Period> d) const {
        std::unique_lock lock(mutex_);
        // wait_until a saturated deadline: wait_for adds `d` to now unchecked, and a huge `d`
        // (a job's "sleep 1e12 s") would wrap into the past and return at once.
        return cv_.wait_until(lock, deadline_in(d), [&] { return stopped_.load(); });
    }

  private:
    mutable std::mutex mutex_;
    mutable std::condition_variable cv_;
    std::atomic<bool> stopped_{false};  // written under mutex_ so that waiters never miss it
};

struct JobContext {
    Job& job;
    spdlog::logger& log;
    const StopSignal& stop;
    redis::Connection& redis;  // this processor thread's connection
    const Keys& keys;
    const Config& config;
    const std::string& identity;  // this process's Sidekiq identity
    bool handler_ran = false;     // set by the chain; false = a middleware parked the job
    // Where a middleware puts idempotent commands that must reach Redis after the job (a lock
    // release): the processor sends them with the job's outcome, its next fetch, or the next
    // job's first round trip (a middleware that makes one passes them to Script::run_after),
    // saving a round trip. Null when the caller offers no such channel: then write directly.
    std::vector<redis::Command>* after_job = nullptr;
    // This process's client (client.hpp), with its client-middleware chain. Null when the
    // caller offers none (tests that build a JobContext by hand).
    const Client* client = nullptr;

    // Enqueues a follow-up job through the process's client — its client middleware (fair-
    // tenant rerouting) included — on this thread's connection. Returns the jid, or "" when a
    // client middleware stopped the push. Throws std::invalid_argument for a malformed job,
    // redis::Error when Redis fails (a handler that lets it escape gets the job retried).
    std::string enqueue(nlohmann::ordered_json job) const;
    std::vector<std::string> enqueue_bulk(std::vector<nlohmann::ordered_json> jobs) const;
    // With reliable fetch, the working list that holds this job (`raw`) until the processor
    // acknowledges it; null otherwise. A middleware that parks the job (returns without
    // next()) removes it from there (LREM 1 raw) in the same atomic step as the park, so a
    // crash in between cannot leave the job in both places and run it twice, and sets this to
    // null: the processor's acknowledgement, a removal by value, would take an identical copy.
    const std::string* working_list = nullptr;
    // Appended to the job's done/fail log lines (" urgency=high ..."): set by the metadata
    // middleware, empty without it.
    std::string log_tags{};
    // What a batched refill acquired for this job ahead of its middlewares (a unique lock, a
    // concurrency slot: src/fetch/refill_acquirer.hpp), or null. A middleware that finds its own
    // item claims it and makes no acquire round trip.
    AcquiredSet* acquired = nullptr;
    // Where a middleware puts the release of what it claimed from `acquired` when that release
    // may wait for the next refill (a roomy scope); null: use after_job.
    std::vector<redis::Command>* after_refill = nullptr;
};

// A failure with a chosen Sidekiq error_class (shown in the Web UI) and optional backtrace.
class JobError : public std::runtime_error {
  public:
    JobError(std::string error_class, const std::string& message,
             std::vector<std::string> backtrace = {})
        : std::runtime_error(message),
          error_class_(std::move(error_class)),
          backtrace_(std::move(backtrace)) {}
    const std::string& error_class() const { return error_class_; }
    const std::vector<std::string>& backtrace() const { return backtrace_; }

  private:
    std::string error_class_;
    std::vector<std::string> backtrace_;
};

// Thrown by a handler that gave up because of a hard shutdown. The job has already been
// pushed back to its queue, so this is not a failure: no retry entry is written.
class Interrupted : public std::runtime_error {
  public:
    Interrupted() : std::runtime_error("interrupted by shutdown") {}
};

}  // namespace kiqd
