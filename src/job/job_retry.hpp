#pragma once
// JobRetry: what happens to a job whose handler failed, exactly as Sidekiq's JobRetry does it
// (docs/data-model.md#retries-and-the-dead-set): the original payload gains
// retry_count/failed_at/retried_at/error_class/error_message (+ error_backtrace when "backtrace"
// is set) — every other field byte-for-byte unchanged — and goes to the "retry" ZSET after
// count⁴ + 15 + jitter seconds, or to "dead" once retries are exhausted (unless "dead": false),
// or nowhere for "retry": false. A payload it cannot edit (not a Job parse_job made) goes to
// "dead" whole, with the reason. plan() is pure (unit-tested); record() writes the plan.
// Stateless; shared by all threads.
#include <atomic>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "job/dead_set.hpp"
#include "kiqd/job.hpp"
#include "kiqd/redis/connection.hpp"

namespace kiqd {

struct Failure {
    Failure() = default;
    Failure(std::string error_class, std::string message, std::vector<std::string> backtrace = {})
        : error_class(std::move(error_class)),
          message(std::move(message)),
          backtrace(std::move(backtrace)) {}
    std::string error_class;
    std::string message;
    std::vector<std::string> backtrace;
    // The job's own delay before the retry (a runner's sidekiq_retry_in), in seconds; Sidekiq's
    // jitter is added. Unset or not positive: count⁴ + 15 + jitter.
    std::optional<long long> retry_in;
    // What the job's class asked for instead of a retry (Sidekiq 7's sidekiq_retry_in returning
    // :kill or :discard): kill = its retries are exhausted now (dead set, exhausted hooks);
    // discard = dropped, as Sidekiq drops it, with no hook.
    enum class GiveUp { no, kill, discard } give_up = GiveUp::no;
    // Called with the dead-set member once the job's retries are exhausted (dead, or discarded
    // with "dead": false): a runner's sidekiq_retries_exhausted and death handlers.
    std::function<void(const std::string& payload)> on_exhausted;
    // A runner that ran Sidekiq's own JobRetry decided the outcome (its order, hooks and
    // exception): retry at `retry_at`, dead, or discard. plan() follows it instead of
    // deciding, and runs no exhausted hook (the runner ran Sidekiq's).
    enum class Decision { none, retry, dead, discard } decision = Decision::none;
    double retry_at = 0;
    // Called once the outcome is written (or could not be): the runner, which waits for it,
    // runs what Sidekiq runs after that write (death and error handlers).
    std::function<void()> after_write;
};

enum class FailureOutcome { Retried, Dead, Discarded };

struct RetryPlan {
    FailureOutcome outcome = FailureOutcome::Discarded;
    std::string payload;  // the retry/dead member
    double score = 0;     // retry-at (Retried) or time of death (Dead)
    // Retries used up (Dead, or Discarded by "dead": false), or none allowed (retry: false;
    // payload is then the job as it was): the runner's exhausted hook runs.
    bool exhausted = false;
};

class JobRetry {
  public:
    JobRetry(Compat compat, int max_retries, const Keys& keys, const DeadSet& dead)
        : compat_(compat), max_retries_(max_retries), keys_(keys), dead_(dead) {}

    // The default retry limit, changed once a runner reported the app's own (any thread).
    int max_retries() const { return max_retries_.load(std::memory_order_relaxed); }
    void set_max_retries(int n) { max_retries_.store(n, std::memory_order_relaxed); }

    RetryPlan plan(const Job& job, const Failure& failure, double now, std::mt19937_64& rng) const;
    // What a failure of `job` at `now` leads to, without building the entry: Retried, Dead
    // (retries exhausted: Sidekiq's death handlers run, also with "dead": false) or Discarded
    // ("retry": false, no death handlers). For middleware that, like the gem's death handler,
    // must clean up after a job that will not come back.
    FailureOutcome fate(const Job& job, double now) const;
    // The plan's writes, bare (no MULTI): the fetcher sends them in one transaction with the
    // job's acknowledgement (Fetcher::with_acknowledgement).
    std::vector<redis::Command> commands(const RetryPlan& plan) const;
    // Seconds until the next attempt after the failure numbered `count` (0 = first failure).
    static long long delay_seconds(long long count, Compat compat, std::mt19937_64& rng);

  private:
    Compat compat_;
    std::atomic<int> max_retries_;
    const Keys& keys_;
    const DeadSet& dead_;
};

// Sidekiq keeps at most 10,000 characters of an error message.
std::string truncate_utf8(const std::string& text, size_t max_chars);

}  // namespace kiqd
